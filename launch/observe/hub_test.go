package observe

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/event"
)

func rowEvent(rank, step int, loss float64) []byte {
	row := event.Row{Rank: 99, Step: step, Steps: 1, Epoch: 1, Loss: loss, LR: 0.1, Samples: 64, SamplesPerSec: 1000,
		StepMS: 10, ForwardMS: 4, BackwardMS: 5, ExposedWaitMS: 2, OptimizerMS: 1, BytesSent: map[string]int64{fmt.Sprint(1 - rank): 4096}}
	data, _ := json.Marshal(row)
	line, _ := json.Marshal(map[string]any{"kind": event.KindRow, "rank": rank, "epoch": 0, "data": json.RawMessage("[" + string(data) + "]")})
	return line
}

// TestHub feeds a hub the events of two ranks and checks each output:
// the merged rows, the trace, Prometheus, the dashboard's state.
func TestHub(t *testing.T) {
	dir := t.TempDir()
	file, trace := filepath.Join(dir, "m.jsonl"), filepath.Join(dir, "t.json")
	h, err := New(Options{RunID: "r1", Node: "0", Ranks: 2, MetricsFile: file, TraceFile: trace, MetricsAddr: "127.0.0.1:0", DashboardAddr: "127.0.0.1:0", FlightDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if env := strings.Join(h.Env(), " "); env != "GOTRAIN_FLIGHT_DIR="+dir+" "+event.EnvObserve+"=hello,rows,file,trace" {
		t.Fatalf("env %q", env)
	}
	var passed int
	events := h.Wrap(func(int, []byte) { passed++ })
	events(0, []byte(`{"kind":"worker","rank":0,"data":{"rank":0,"host":"a","pid":123,"restart":1}}`))
	for step := 1; step <= 3; step++ {
		events(0, rowEvent(0, step, 2))
		events(1, rowEvent(1, step, 3))
	}
	events(1, []byte(`{"kind":"trace","rank":1,"data":[{"name":"forward","ph":"X","ts":10,"dur":5,"pid":1,"tid":0,"args":{"bucket":3,"bytes":4096}}]}`))
	events(1, []byte(`{"kind":"trace","rank":1,"data":[{"name":"cut short"`)) // not JSON: dropped
	events(1, []byte(`{"kind":"trace","rank":1,"data":[]}`))                  // nothing to write
	events(1, []byte(`not json`))
	events(1, []byte(`{"kind":"step","epoch":1}`))
	if passed != 12 {
		t.Fatalf("%d events passed on to the console, want all 12", passed)
	}

	body := scrape(t, h)
	for _, want := range []string{
		`gotrain_steps_total{node="0",rank="1",run_id="r1"} 3`,
		`gotrain_loss{node="0",rank="0",run_id="r1"} 2`,
		`gotrain_step_seconds{node="0",rank="1",run_id="r1"} 0.01`,
		`gotrain_exposed_allreduce_wait_seconds{node="0",rank="0",run_id="r1"} 0.002`,
		`gotrain_bytes_sent_total{node="0",peer="1",rank="0",run_id="r1"} 12288`,
		`gotrain_restarts{node="0",rank="0",run_id="r1"} 0`, // the rows' restart count wins over the hello's
		`gotrain_step_phase_seconds{node="0",phase="backward",rank="0",run_id="r1"} 0.005`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	st := h.Snapshot()
	if st.State != "running" || len(st.Workers) != 2 || st.Workers[0].PID != 123 || st.Workers[0].Host != "a" || len(st.Series[1]) != 3 || st.Series[1][2][2] != 3 {
		t.Fatalf("snapshot %+v", st)
	}
	resp, err := http.Get("http://" + h.Addr("dashboard") + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(page), `<svg id="steptime"`) {
		t.Fatalf("dashboard page:\n%s", page)
	}

	h.SetState("succeeded")
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(file)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 6 || !strings.Contains(lines[1], `"rank":1`) {
		t.Fatalf("metrics file:\n%s", b)
	}
	b, _ = os.ReadFile(trace)
	var tr struct{ TraceEvents []event.TraceEvent }
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatalf("trace: %v\n%s", err, b)
	}
	last := tr.TraceEvents[len(tr.TraceEvents)-1]
	if last.Name != "forward" || last.PID != 1 || last.Args["bucket"] != 3.0 || last.Args["bytes"] != 4096.0 || tr.TraceEvents[0].Name != "process_name" {
		t.Fatalf("trace %+v", tr.TraceEvents)
	}
}

// TestHistoryBounded keeps the dashboard's memory bounded on a long run.
func TestHistoryBounded(t *testing.T) {
	h, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for step := 1; step <= 3*historyLen; step++ {
		h.Event(0, rowEvent(0, step, 1))
	}
	s := h.Snapshot().Series[0]
	if len(s) > historyLen || s[0][0] != 1 || s[len(s)-1][0] != 3*historyLen {
		t.Fatalf("%d points from step %v to %v", len(s), s[0][0], s[len(s)-1][0])
	}
}

// TestBadAddress names the server.
func TestBadAddress(t *testing.T) {
	_, err := New(Options{DashboardAddr: "256.0.0.1:1"})
	if err == nil || !strings.Contains(err.Error(), "dashboard address") {
		t.Fatalf("err %v", err)
	}
}

// TestNodeOf labels each rank with its own node when the launcher starts
// ranks on several.
func TestNodeOf(t *testing.T) {
	h, err := New(Options{RunID: "r2", NodeOf: func(rank int) string { return fmt.Sprint(rank / 2) }, MetricsAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for rank := range 4 {
		h.Event(rank, rowEvent(rank%2, 1, 2))
	}
	body := scrape(t, h)
	for _, want := range []string{
		`gotrain_steps_total{node="0",rank="1",run_id="r2"} 1`,
		`gotrain_steps_total{node="1",rank="2",run_id="r2"} 1`,
		`gotrain_steps_total{node="1",rank="3",run_id="r2"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// scrape returns the hub's /metrics page.
func scrape(t *testing.T, h *Hub) string {
	t.Helper()
	resp, err := http.Get("http://" + h.Addr("metrics") + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}
