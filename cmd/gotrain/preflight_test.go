package main

import (
	"bytes"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/distributed/shm"
	"github.com/gotrain/gotrain/launch"
)

func TestCPUWarning(t *testing.T) {
	if msg := cpuWarning(4, 4); msg != "" {
		t.Errorf("4 workers on 4 CPUs: %q", msg)
	}
	msg := cpuWarning(5, 4)
	for _, want := range []string{"--nproc-per-node 5", "4 CPUs", "share CPUs", "spin less", "4 or fewer is usually faster"} {
		if !strings.Contains(msg, want) {
			t.Errorf("5 workers on 4 CPUs: %q lacks %q", msg, want)
		}
	}
}

func TestShmWarning(t *testing.T) {
	if msg := shmWarning(16, 2<<30, 2<<30); msg != "" {
		t.Errorf("need = free: %q", msg)
	}
	msg := shmWarning(16, shm.Need(16, 16), 64<<20)
	for _, want := range []string{"16 local workers", "need 1.9 GiB", "has 64 MiB free", "fall back to TCP", "--shm-size=3g", "GOTRAIN_SHM=0"} {
		if !strings.Contains(msg, want) {
			t.Errorf("16 workers in Docker's default /dev/shm: %q lacks %q", msg, want)
		}
	}
	for _, tc := range []struct {
		n          int64
		size, dock string
	}{
		{1, "1 MiB", "256m"},
		{80 << 20, "80 MiB", "256m"},
		{300 << 20, "300 MiB", "512m"},
		{900 << 20, "900 MiB", "2g"},
		{5 << 30, "5.0 GiB", "7g"},
	} {
		if got := sizeString(tc.n); got != tc.size {
			t.Errorf("sizeString(%d) = %q, want %q", tc.n, got, tc.size)
		}
		if got := dockerSize(tc.n); got != tc.dock {
			t.Errorf("dockerSize(%d) = %q, want %q", tc.n, got, tc.dock)
		}
	}
}

// TestWarnBeforeStart: one warning line per cost, through the launcher's
// logger, and none when the job fits.
func TestWarnBeforeStart(t *testing.T) {
	t.Setenv("GOTRAIN_SHM", "")
	count := func(nproc int) (string, int) {
		var buf bytes.Buffer
		warnBeforeStart(launch.Config{NProcPerNode: nproc, NNodes: 1, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
		return buf.String(), strings.Count(buf.String(), "\n")
	}
	if out, n := count(1); n != 0 {
		t.Errorf("one worker: %q", out)
	}
	over := runtime.NumCPU() + 1
	want := 1
	if shm.Enabled() {
		if free, err := shm.Free(); err != nil || shm.Need(over, over) > free {
			want = 2
		}
	}
	out, n := count(over)
	if n != want || !strings.Contains(out, "level=WARN") || !strings.Contains(out, "--nproc-per-node "+strconv.Itoa(over)) {
		t.Errorf("%d workers on %d CPUs: %d lines, want %d:\n%s", over, runtime.NumCPU(), n, want, out)
	}
	t.Setenv("GOTRAIN_SHM", "0")
	if out, n := count(over); n != 1 {
		t.Errorf("%d workers on %d CPUs, shared memory off: %d lines, want 1:\n%s", over, runtime.NumCPU(), n, out)
	}
}

// TestRunWarnsAboveCPUCount: gotrain run with more workers than CPUs
// prints the warning once and runs the job.
func TestRunWarnsAboveCPUCount(t *testing.T) {
	n := strconv.Itoa(runtime.NumCPU() + 1)
	all, _, code := runGotrain(t, 60*time.Second, "run", "--standalone", "--nproc-per-node", n, "true")
	if code != 0 || strings.Count(all, "is more than the") != 1 || !strings.Contains(all, "--nproc-per-node "+n) {
		t.Errorf("gotrain run --nproc-per-node %s true: exit %d, want 0 and one CPU warning:\n%s", n, code, all)
	}
}
