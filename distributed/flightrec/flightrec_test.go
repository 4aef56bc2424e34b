package flightrec

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/distributed"
)

func rec(seq uint64, state string, start, end int64) distributed.CollectiveRecord {
	return distributed.CollectiveRecord{Op: "allreduce", Seq: seq, DType: "float32", Count: 100, Root: -1, Peer: -1, State: state, Start: start, End: end}
}

// TestAnalyzeNamesTheLaggard: rank 1's last collective is #5401 while
// ranks 0, 2 and 3 wait in #5402.
func TestAnalyzeNamesTheLaggard(t *testing.T) {
	s := int64(time.Second)
	t0 := 1000 * s
	var dumps []distributed.FlightDump
	for r := range 4 {
		d := distributed.FlightDump{Rank: r, World: 4, Host: "h", PID: 10 + r, Reason: "SIGUSR1", Time: t0 + 30*s,
			Records: []distributed.CollectiveRecord{rec(5400, distributed.StateCompleted, t0-2*s, t0-s), rec(5401, distributed.StateCompleted, t0-s, t0)}}
		if r != 1 {
			d.Records = append(d.Records, rec(5402, distributed.StateStarted, t0, 0))
		}
		dumps = append(dumps, d)
	}
	findings, lines := Analyze(dumps)
	if len(findings) != 1 || !slices.Equal(findings[0].Missing, []int{1}) || !slices.Equal(findings[0].Waiting, []int{0, 2, 3}) || findings[0].Seq != 5402 {
		t.Fatalf("findings %+v\n%s", findings, strings.Join(lines, "\n"))
	}
	want := "rank 1 never entered allreduce #5402 (its last: allreduce #5401, completed); ranks 0, 2, 3 waited 30s"
	if !strings.Contains(strings.Join(lines, "\n"), want) {
		t.Fatalf("report lacks %q:\n%s", want, strings.Join(lines, "\n"))
	}
}

// TestAnalyzeMissingDump: a stopped rank leaves no dump; the rank whose
// allreduce failed waiting for it does.
func TestAnalyzeMissingDump(t *testing.T) {
	r := rec(57, distributed.StateFailed, 100, 100+int64(3*time.Second))
	r.Peer = 1
	findings, lines := Analyze([]distributed.FlightDump{{Rank: 0, World: 2, Reason: "operation failed", Time: r.End, Records: []distributed.CollectiveRecord{r}}})
	report := strings.Join(lines, "\n")
	if len(findings) != 1 || !slices.Equal(findings[0].Missing, []int{1}) ||
		!strings.Contains(report, "rank 1 never entered allreduce #57 (it left no dump); rank 0 waited 3s (rank 0's failed waiting for rank 1)") ||
		!strings.Contains(report, "none from rank 1") {
		t.Fatalf("findings %+v\n%s", findings, report)
	}
}

// TestLoadErrors name the directory or the file.
func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "no flight_rank*.json dumps in "+dir) {
		t.Fatalf("empty dir: %v", err)
	}
	if _, err := Load(filepath.Join(dir, "nope")); err == nil {
		t.Fatal("missing dir: no error")
	}
	bad := filepath.Join(dir, "flight_rank0.json")
	os.WriteFile(bad, []byte("{"), 0o644)
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), bad+" is not a flight-recorder dump") {
		t.Fatalf("bad file: %v", err)
	}
	b, _ := json.Marshal(distributed.FlightDump{Rank: 3, World: 2})
	os.WriteFile(bad, b, 0o644)
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "rank 3 of world 2") {
		t.Fatalf("bad rank: %v", err)
	}
}
