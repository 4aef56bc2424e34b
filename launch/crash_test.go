package launch_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/launch"
)

// TestWorkerCrashReport: a worker's Go panic shows on the console as its
// reason's line with the path of a file holding the goroutine stacks, and
// the failure report's tail ends with that line, not with stack frames.
func TestWorkerCrashReport(t *testing.T) {
	for _, withLogDir := range []bool{true, false} {
		j := newJob(t, 2, "exit:0", map[int]string{1: "panic"})
		tmp := t.TempDir()
		t.Setenv("TMPDIR", tmp)
		if withLogDir {
			j.cfg.LogDir = t.TempDir()
		}
		var fail []launch.Failure
		j.cfg.OnFailure = func(f launch.Failure) { fail = append(fail, f) }
		code, err := j.run(t, context.Background())
		if code != 2 || err != nil {
			t.Fatalf("Run = %d, %v; want Go's panic status 2", code, err)
		}
		console := j.stderr.String()
		m := regexp.MustCompile(`(?m)^\[rank1\]: panic: worker gave up \(Go runtime crash: goroutine stacks in (\S+)\)$`).FindStringSubmatch(console)
		if m == nil || strings.Contains(console, "goroutine 1 [running]") {
			t.Fatalf("console shows no one-line crash, or the stacks:\n%s", console)
		}
		report, err := os.ReadFile(m[1])
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(report), "panic: worker gave up\n") || !strings.Contains(string(report), "\ngoroutine ") {
			t.Errorf("report %s:\n%s", m[1], report)
		}
		want := tmp
		if withLogDir {
			want = j.cfg.LogDir
			// The worker's stderr log keeps everything it wrote.
			logs, _ := filepath.Glob(filepath.Join(j.cfg.LogDir, "*", "attempt_0", "1", "stderr.log"))
			if len(logs) != 1 {
				t.Fatalf("stderr logs %v", logs)
			}
			if b, _ := os.ReadFile(logs[0]); !strings.Contains(string(b), "before the crash\npanic: worker gave up\n") || !strings.Contains(string(b), "goroutine ") {
				t.Errorf("stderr.log lacks the raw crash:\n%s", b)
			}
		}
		if !strings.HasPrefix(m[1], want+string(filepath.Separator)) {
			t.Errorf("report at %s, want under %s", m[1], want)
		}
		if len(fail) != 1 {
			t.Fatalf("failures reported: %v", fail)
		}
		tail := fail[0].Stderr
		if len(tail) != 2 || tail[0] != "before the crash" || !strings.HasPrefix(tail[1], "panic: worker gave up (Go runtime crash") {
			t.Errorf("failure tail %q, want the line before and the crash line", tail)
		}
	}
}
