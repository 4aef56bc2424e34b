package launch_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/event"
)

// TestEvents: each line a worker writes to the descriptor named by
// GOTRAIN_EVENTS_FD reaches Events with its global rank; an inherited
// GOTRAIN_EVENTS_FD never reaches workers when there is no Events.
func TestEvents(t *testing.T) {
	j := newJob(t, 2, "", nil)
	j.setEnv(event.EnvFD + "=9") // a launcher's own launcher's pipe
	j.cfg.NNodes, j.cfg.NodeRank, j.cfg.Standalone = 2, 1, false
	j.setEnv("GOTRAIN_TOKEN=t")
	j.cfg.MasterAddr, j.cfg.MasterPort = "10.9.8.7", 1 // nothing connects: the workers are sh
	j.cfg.Program, j.cfg.Args = "sh", []string{"-c",
		`printf '{"n":1}\n\n{"n":2}\n' >&$` + event.EnvFD + `; printf 'last' >&3; echo "fd=$` + event.EnvFD + `"`}
	j.cfg.LogDir = t.TempDir()
	var got []string
	j.cfg.Events = func(rank int, line []byte) { got = append(got, fmt.Sprintf("%d %s", rank, line)) }
	if code, err := j.run(t, context.Background()); code != 0 || err != nil {
		t.Fatalf("Run = %d, %v; stderr:\n%s", code, err, j.stderr.String())
	}
	slices.Sort(got)
	want := []string{`2 last`, `2 {"n":1}`, `2 {"n":2}`, `3 last`, `3 {"n":1}`, `3 {"n":2}`}
	if !slices.Equal(got, want) {
		t.Fatalf("events %q; want %q", got, want)
	}
	if n := strings.Count(j.stdout.String(), "fd=3\n"); n != 2 {
		t.Fatalf("stdout %q: want %s=3 for both workers", j.stdout.String(), event.EnvFD)
	}
	// With a log directory the events are kept beside each worker's output.
	logs, err := filepath.Glob(filepath.Join(j.cfg.LogDir, "*", "attempt_0", "1", "events.jsonl"))
	if err != nil || len(logs) != 1 {
		t.Fatalf("events logs %v, %v; want local rank 1's", logs, err)
	}
	if b, err := os.ReadFile(logs[0]); err != nil || string(b) != "{\"n\":1}\n\n{\"n\":2}\nlast" {
		t.Fatalf("events log %q, %v; want the raw lines", b, err)
	}

	j.cfg.Events = nil
	j.cfg.Args = []string{"-c", `echo "fd=${` + event.EnvFD + `-unset}"`}
	if code, err := j.run(t, context.Background()); code != 0 || err != nil {
		t.Fatalf("Run = %d, %v; stderr:\n%s", code, err, j.stderr.String())
	}
	if n := strings.Count(j.stdout.String(), "fd=unset\n"); n != 2 {
		t.Fatalf("stdout %q: want %s unset for both workers without Events", j.stdout.String(), event.EnvFD)
	}
}
