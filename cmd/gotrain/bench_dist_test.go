package main

import (
	"context"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testlog"
)

// TestBenchAllReduce: the launcher starts the ranks, and stdout holds one
// unprefixed result line per size.
func TestBenchAllReduce(t *testing.T) {
	all, stdout, code := runGotrain(t, 60*time.Second, "bench", "allreduce", "--nproc", "3", "--sizes", "4096,0,65536")
	if code != 0 {
		t.Fatalf("exit code %d; output:\n%s", code, all)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	want := regexp.MustCompile(`^op=allreduce world=3 bytes=(\d+) median_s=\d+\.\d{6} algbw_GBps=\d+\.\d{3} busbw_GBps=\d+\.\d{3}$`)
	var sizes []string
	for _, l := range lines {
		m := want.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("line %q does not match %v; stdout:\n%s", l, want, stdout)
		}
		sizes = append(sizes, m[1])
	}
	if got := strings.Join(sizes, ","); got != "4096,0,65536" {
		t.Fatalf("sizes %s, want 4096,0,65536; stdout:\n%s", got, stdout)
	}
}

// TestBenchWorkerFails: a worker's failure (here a bad algorithm in the
// environment, refused by every rank's Init) is the command's exit status.
func TestBenchWorkerFails(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := gotrainCmd(ctx, t, "bench", "allreduce", "--nproc", "2", "--sizes", "4096")
	cmd.Env = append(cmd.Env, "GOTRAIN_ALLREDUCE_ALGO=bogus")
	var all, stdout testlog.Buffer
	cmd.Stdout, cmd.Stderr = io.MultiWriter(&all, &stdout), &all
	_ = cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code != 1 {
		t.Fatalf("exit code %d with GOTRAIN_ALLREDUCE_ALGO=bogus, want the workers' 1; output:\n%s", code, all.String())
	}
	if stdout.String() != "" {
		t.Errorf("results printed although the workers failed:\n%s", stdout.String())
	}
	if !strings.Contains(all.String(), "bogus") {
		t.Errorf("output does not name the bad algorithm:\n%s", all.String())
	}
}
