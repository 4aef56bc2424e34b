package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gotrain/gotrain/event"
)

// readRows reads a metrics file.
func readRows(t *testing.T, path string) []event.Row {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []event.Row
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r event.Row
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s: row %q: %v", path, sc.Text(), err)
		}
		rows = append(rows, r)
	}
	return rows
}

// checkRankRows checks one rank's rows of a run of steps steps of
// samples samples each: every step once, in order, phases adding up to
// the step, and the steps adding up to the rank's wall time, less
// untimedMS (checkpoints and evaluations between steps), within 10%.
func checkRankRows(t *testing.T, rank int, rows []event.Row, steps, samples int, untimedMS float64) {
	t.Helper()
	if len(rows) != steps {
		t.Fatalf("rank %d: %d rows, want %d", rank, len(rows), steps)
	}
	var total float64
	for i, r := range rows {
		if r.Step != i+1 || r.Steps != 1 || r.Epoch != 1 || r.Samples != samples || r.LR <= 0 || r.Loss <= 0 || r.SamplesPerSec <= 0 {
			t.Fatalf("rank %d row %d: %+v", rank, i, r)
		}
		phases := r.DataMS + r.ForwardMS + r.BackwardMS + r.OptimizerMS
		if math.Abs(phases-r.StepMS) > 0.01*r.StepMS+0.01 {
			t.Fatalf("rank %d step %d: phases add to %.3f ms, step %.3f ms", rank, r.Step, phases, r.StepMS)
		}
		if r.ExposedWaitMS > r.BackwardMS+0.01 {
			t.Fatalf("rank %d step %d: exposed wait %.3f ms exceeds backward %.3f ms", rank, r.Step, r.ExposedWaitMS, r.BackwardMS)
		}
		total += r.StepMS
	}
	wall := (rows[len(rows)-1].Time-rows[0].Start)*1e3 - untimedMS
	if total > wall*1.10 || total < wall*0.90 {
		t.Fatalf("rank %d: steps add up to %.1f ms, wall time %.1f ms: not within 10%%", rank, total, wall)
	}
}

// TestMetricsAndTraceTwoWorkers trains 2 workers over TCP with --metrics
// and --trace: every rank's rows are in the launcher's file, their times
// add up, bytes went to the peer, and the merged trace holds each rank's
// phases and bucket allreduces.
func TestMetricsAndTraceTwoWorkers(t *testing.T) {
	t.Setenv("GOTRAIN_SHM", "0") // over TCP, so bytes per peer move
	dir := t.TempDir()
	file, trace := filepath.Join(dir, "metrics.jsonl"), filepath.Join(dir, "trace.json")
	const steps = 25
	all, _, code := runGotrain(t, 90*time.Second, "train", "mnist", "--nproc-per-node", "2", "--max-steps", fmt.Sprint(steps),
		"--metrics", file, "--trace", trace, "--save", filepath.Join(dir, "model.safetensors"), "--save-every", "10")
	if code != 0 {
		t.Fatalf("exit code %d; output:\n%s", code, all)
	}
	byRank := map[int][]event.Row{}
	for _, r := range readRows(t, file) {
		byRank[r.Rank] = append(byRank[r.Rank], r)
	}
	if len(byRank) != 2 || len(byRank[0]) != steps || len(byRank[1]) != steps {
		t.Fatalf("rows of ranks %v (%d and %d rows), want %d of ranks 0 and 1", keys(byRank), len(byRank[0]), len(byRank[1]), steps)
	}
	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	var tr struct {
		TraceEvents []event.TraceEvent `json:"traceEvents"`
	}
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatalf("trace is not trace-event JSON: %v", err)
	}
	count := map[string]int{}
	untimed := map[int]float64{} // checkpoints between steps, in ms
	for _, e := range tr.TraceEvents {
		if e.Ph == "X" && e.Name == "checkpoint" && (e.PID != 0 || e.TS/1e6 < byRank[0][steps-1].Time) {
			untimed[e.PID] += e.Dur / 1e3
		}
		if e.Ph == "X" {
			if e.Dur < 0 || e.TS <= 0 {
				t.Fatalf("span %+v", e)
			}
			name := e.Name
			if strings.HasPrefix(name, "allreduce bucket ") {
				name = "allreduce"
				if e.TID != event.TIDAllReduce {
					t.Fatalf("allreduce span on track %d: %+v", e.TID, e)
				}
			}
			count[fmt.Sprintf("%d/%s", e.PID, name)]++
		}
	}
	for rank, rows := range byRank {
		checkRankRows(t, rank, rows, steps, 64, untimed[rank])
		peer := fmt.Sprint(1 - rank)
		var sent int64
		for _, r := range rows {
			sent += r.BytesSent[peer]
		}
		// 25 allreduces of the MLP's 669,706 gradients: each rank sends
		// about half of 2.7 MB per step.
		if sent < steps*669706*4/2 {
			t.Fatalf("rank %d sent %d bytes to rank %s in %d steps", rank, sent, peer, steps)
		}
	}

	// Rank 0 saves at steps 10 and 20, and at the end; and evaluates.
	if count["0/checkpoint"] != 3 || count["0/evaluate"] != 1 || count["1/checkpoint"] != 0 {
		t.Errorf("checkpoint and evaluate spans: %v", count)
	}
	for rank := range 2 {
		for _, name := range []string{"forward", "backward", "optimizer", "data"} {
			if n := count[fmt.Sprintf("%d/%s", rank, name)]; n != steps {
				t.Errorf("rank %d: %d %s spans, want %d", rank, n, name, steps)
			}
		}
		if n := count[fmt.Sprintf("%d/allreduce", rank)]; n < steps {
			t.Errorf("rank %d: %d allreduce spans in %d steps", rank, n, steps)
		}
	}
}

// TestMetricsFileAlone is the same file written by one worker alone.
func TestMetricsFileAlone(t *testing.T) {
	dir := t.TempDir()
	file, trace := filepath.Join(dir, "metrics.jsonl"), filepath.Join(dir, "trace.json")
	all, _, code := runGotrain(t, 60*time.Second, "train", "mnist", "--max-steps", "12", "--metrics", file, "--trace", trace, "--progress=false")
	if code != 0 {
		t.Fatalf("exit code %d; output:\n%s", code, all)
	}
	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	var tr struct {
		TraceEvents []event.TraceEvent `json:"traceEvents"`
	}
	if err := json.Unmarshal(b, &tr); err != nil || len(tr.TraceEvents) < 12*5 {
		t.Fatalf("trace of %d events: %v", len(tr.TraceEvents), err)
	}
	rows := readRows(t, file)
	checkRankRows(t, 0, rows, 12, 64, 0)
	if rows[0].ExposedWaitMS != 0 || len(rows[0].BytesSent) != 0 {
		t.Fatalf("a single process has no communication: %+v", rows[0])
	}
}

// TestObserveFlagErrors are one clear line each.
func TestObserveFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"train", "mnist", "--dashboard", ":0", "--dashboard-linger", "soon"}, "--dashboard-linger soon: want a duration like 60s"},
		{[]string{"train", "mnist", "--dashboard-linger", "1m"}, "--dashboard-linger: needs --dashboard"},
		{[]string{"train", "mnist", "--dashboard", ":0", "--progress=false"}, "--dashboard: needs --progress"},
		{[]string{"train", "mnist", "--nproc-per-node", "2", "--dashboard", "nope"}, "--dashboard nope: want HOST:PORT or :PORT"},
		{[]string{"train", "mnist", "--metrics-every", "0"}, "--metrics-every 0: must be at least 1"},
		{[]string{"train", "mnist", "--metrics", "/no/such/dir/m.jsonl"}, "--metrics /no/such/dir/m.jsonl: directory /no/such/dir does not exist"},
		{[]string{"train", "mnist", "--nproc-per-node", "2", "--trace", "t.json", "--progress=false"}, "--trace: needs --progress"},
	} {
		all, _, code := runGotrain(t, 30*time.Second, tc.args...)
		if code != exitUsage || !strings.Contains(all, tc.want) || strings.Count(strings.TrimSpace(all), "\n") > 0 {
			t.Errorf("gotrain %s: exit %d, output %q; want one line with %q", strings.Join(tc.args, " "), code, all, tc.want)
		}
	}
}

// startedGotrain is a gotrain process running in the background, whose
// output the test can wait on.
type startedGotrain struct {
	t    *testing.T
	done chan struct{} // closed when it has exited and its output is complete
	all  *output       // stdout and stderr
	pid  int
	code int
}

// startWatched starts `gotrain args...` (killed at limit or the test's
// end).
func startWatched(t *testing.T, limit time.Duration, env []string, args ...string) *startedGotrain {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	cmd := gotrainCmd(ctx, t, args...)
	cmd.Env = append(cmd.Env, env...)
	g := &startedGotrain{t: t, done: make(chan struct{}), all: newOutput(nil)}
	cmd.Stdout, cmd.Stderr = g.all, g.all
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	g.pid = cmd.Process.Pid
	go func() {
		_ = cmd.Wait()
		g.code = cmd.ProcessState.ExitCode()
		close(g.done)
		g.all.bell.ring() // for waitLine's waiters
	}()
	t.Cleanup(func() {
		cancel()
		<-g.done
	})
	return g
}

// ended reports whether gotrain has exited.
func (g *startedGotrain) ended() bool {
	select {
	case <-g.done:
		return true
	default:
		return false
	}
}

// waitLine waits for a line of output matching re and returns its
// submatches.
func (g *startedGotrain) waitLine(re *regexp.Regexp, limit time.Duration) []string {
	g.t.Helper()
	var m []string
	ended := false
	g.all.waitFor(limit, func(string) bool {
		ended = g.ended() // first: if it has exited, the output read next is complete
		for l := range strings.Lines(g.all.String()) {
			if !strings.HasSuffix(l, "\n") && !ended {
				break // a line still being written
			}
			if m = re.FindStringSubmatch(l); m != nil {
				return true
			}
		}
		return ended
	})
	switch {
	case m != nil:
		return m
	case ended:
		g.t.Fatalf("gotrain exited (code %d) before printing %v; output:\n%s", g.code, re, g.all.String())
	default:
		g.t.Fatalf("no line %v within %v; output:\n%s", re, limit, g.all.String())
	}
	return nil
}

// fatal fails the test saying what went wrong, whether gotrain has
// exited (a server of it that refuses connections has usually gone with
// it: that is given a few seconds to show), and its output.
func (g *startedGotrain) fatal(format string, args ...any) {
	g.t.Helper()
	state := "still running"
	select {
	case <-g.done:
		state = fmt.Sprintf("exited with code %d", g.code)
	case <-time.After(5 * time.Second):
	}
	g.t.Fatalf("%s; gotrain %s; output:\n%s", fmt.Sprintf(format, args...), state, g.all.String())
}

// stop ends the run with SIGTERM and waits for it.
func (g *startedGotrain) stop() {
	if g.pid > 0 {
		_ = syscall.Kill(g.pid, syscall.SIGTERM)
	}
	<-g.done
}

var servingRe = func(what string) *regexp.Regexp {
	return regexp.MustCompile(`serving ` + what + `.* addr=(http://[0-9.:]+)`)
}

// TestPrometheusDuringRun scrapes /metrics of a 2-worker run twice: the
// series exist for both ranks with their labels, and the step counters
// move.
func TestPrometheusDuringRun(t *testing.T) {
	g := startWatched(t, 120*time.Second, nil, "train", "mnist", "--nproc-per-node", "2", "--epochs", "1000", // on until stopped
		"--metrics-addr", "127.0.0.1:0")
	url := g.waitLine(servingRe("metrics"), 30*time.Second)[1] + "/metrics"
	stepsRe := regexp.MustCompile(`(?m)^gotrain_steps_total\{node="0",rank="(\d)",run_id="[0-9a-f]+"\} (\d+)`)
	scrape := func() (string, map[string]float64) {
		resp, err := http.Get(url)
		if err != nil {
			g.fatal("scraping %s: %v", url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		steps := map[string]float64{}
		for _, m := range stepsRe.FindAllStringSubmatch(string(b), -1) {
			var v float64
			fmt.Sscan(m[2], &v)
			steps[m[1]] = v
		}
		return string(b), steps
	}
	// /metrics announces nothing: it is scraped until both counters have
	// moved past their first values.
	var first, steps map[string]float64
	var body string
	moved := poll(60*time.Second, 100*time.Millisecond, func() bool {
		body, steps = scrape()
		if first == nil && len(steps) == 2 {
			first = steps
			for _, name := range []string{"gotrain_step_seconds", "gotrain_samples_per_second", "gotrain_exposed_allreduce_wait_seconds",
				"gotrain_loss", "gotrain_restarts", "gotrain_learning_rate", `gotrain_step_phase_seconds{node="0",phase="forward",rank="1",run_id=`} {
				if !strings.Contains(body, name) {
					t.Fatalf("no %s in /metrics:\n%s", name, body)
				}
			}
			return false
		}
		return first != nil && steps["0"] > first["0"] && steps["1"] > first["1"]
	})
	if !moved {
		t.Fatalf("steps did not move in 60 s: first %v, now %v\n%s", first, steps, body)
	}
	g.stop()
}

func keys[K comparable, V any](m map[K]V) []K {
	var out []K
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestRunWritesMetricsAndTrace: `gotrain run` observes any program that
// records with package metrics (here gotrain's own demo job, started as
// a plain program): the launcher writes both ranks' rows and spans.
func TestRunWritesMetricsAndTrace(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file, trace := filepath.Join(dir, "m.jsonl"), filepath.Join(dir, "t.json")
	all, _, code := runGotrain(t, 90*time.Second, "run", "--standalone", "--nproc-per-node", "2", "--metrics", file, "--trace", trace,
		self, "train", "mnist", "--max-steps", "10")
	if code != 0 {
		t.Fatalf("exit code %d; output:\n%s", code, all)
	}
	byRank := map[int][]event.Row{}
	for _, r := range readRows(t, file) {
		byRank[r.Rank] = append(byRank[r.Rank], r)
	}
	for rank := range 2 {
		checkRankRows(t, rank, byRank[rank], 10, 64, 0)
	}
	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	var tr struct {
		TraceEvents []event.TraceEvent `json:"traceEvents"`
	}
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatalf("trace: %v", err)
	}
	buckets := map[int]int{}
	for _, e := range tr.TraceEvents {
		if strings.HasPrefix(e.Name, "allreduce bucket ") {
			buckets[e.PID]++
		}
	}
	if buckets[0] < 10 || buckets[1] < 10 {
		t.Fatalf("allreduce spans per rank: %v", buckets)
	}
}
