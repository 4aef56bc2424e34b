package main

import (
	"context"
	"io"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gotrain/gotrain/distributed/clusterenv"
	"github.com/gotrain/gotrain/internal/testlog"
)

// startOnCPUs starts cmd with its CPU affinity limited to n of this
// process's CPUs: the child inherits the mask of the thread that forks
// it, so a locked thread takes the mask and starts it.
func startOnCPUs(t *testing.T, start func() error, n int) {
	t.Helper()
	var have unix.CPUSet
	if err := unix.SchedGetaffinity(0, &have); err != nil {
		t.Fatal(err)
	}
	var mask unix.CPUSet
	for c := 0; c < len(have)*64 && mask.Count() < n; c++ {
		if have.IsSet(c) {
			mask.Set(c)
		}
	}
	if mask.Count() < n {
		t.Skipf("this process may use %d CPUs, the test needs %d", have.Count(), n)
	}
	errc := make(chan error, 1)
	go func() {
		// The thread keeps the mask: locked and never unlocked, it ends
		// with this goroutine.
		runtime.LockOSThread()
		if err := unix.SchedSetaffinity(0, &mask); err != nil {
			errc <- err
			return
		}
		errc <- start()
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TestTrainNProcAuto runs `gotrain train mnist --nproc-per-node auto` on
// two CPUs: the layout measured fastest there is 2 workers of 1 thread
// each, and each worker's kernels run the one thread the launcher gave it.
func TestTrainNProcAuto(t *testing.T) {
	if clusterenv.CPUs() < 2 {
		t.Skipf("%d CPUs (quota): the test needs 2", clusterenv.CPUs())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := gotrainCmd(ctx, t, "train", "mnist", "--nproc-per-node", "auto", "--max-steps", "3", "--progress=false")
	var out, stdout testlog.Buffer
	cmd.Stdout, cmd.Stderr = io.MultiWriter(&out, &stdout), &out
	startOnCPUs(t, cmd.Start, 2)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("gotrain train mnist --nproc-per-node auto: %v; output:\n%s", err, out.String())
	}
	text := out.String()
	if !strings.Contains(text, "--nproc-per-node auto\" workers=2 threads_per_worker=1 cpus=2") {
		t.Errorf("want the launcher to choose 2 workers × 1 thread on 2 CPUs; output:\n%s", text)
	}
	var ranks []string
	for _, m := range regexp.MustCompile(`(?m)^\[(rank\d+)\]: .*msg="kernel threads" .*threads=(\d+)`).FindAllStringSubmatch(text, -1) {
		if m[2] != "1" {
			t.Errorf("%s runs %s kernel threads, want 1", m[1], m[2])
		}
		ranks = append(ranks, m[1])
	}
	slices.Sort(ranks)
	if !slices.Equal(ranks, []string{"rank0", "rank1"}) {
		t.Errorf("kernel thread counts reported by %v, want rank0 and rank1; output:\n%s", ranks, text)
	}
	if kv := summary(t, stdout.String()); kv["world"] != "2" {
		t.Errorf("summary world=%s, want 2", kv["world"])
	}
	if testing.Verbose() {
		t.Log(text)
	}
}
