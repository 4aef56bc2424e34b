package main

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"runtime"
	"slices"
	"strconv"
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
// two CPUs for each model, with the layout measured fastest there: the
// CNN as 2 workers of 1 thread each, the MLP as one worker of 2 threads;
// each worker's kernels run the threads the launcher gave it.
func TestTrainNProcAuto(t *testing.T) {
	if clusterenv.CPUs() < 2 {
		t.Skipf("%d CPUs (quota): the test needs 2", clusterenv.CPUs())
	}
	for _, tc := range []struct {
		model            string
		workers, threads int
	}{
		{"cnn", 2, 1},
		{"mlp", 1, 2},
	} {
		t.Run(tc.model, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := gotrainCmd(ctx, t, "train", "mnist", "--model", tc.model, "--nproc-per-node", "auto", "--max-steps", "3", "--progress=false")
			var out, stdout testlog.Buffer
			cmd.Stdout, cmd.Stderr = io.MultiWriter(&out, &stdout), &out
			startOnCPUs(t, cmd.Start, 2)
			if err := cmd.Wait(); err != nil {
				t.Fatalf("gotrain train mnist --model %s --nproc-per-node auto: %v; output:\n%s", tc.model, err, out.String())
			}
			text := out.String()
			layout := fmt.Sprintf("--nproc-per-node auto\" workers=%d threads_per_worker=%d cpus=2", tc.workers, tc.threads)
			if !strings.Contains(text, layout) {
				t.Errorf("want the launcher to choose %d workers × %d threads on 2 CPUs; output:\n%s", tc.workers, tc.threads, text)
			}
			var ranks []string
			for _, m := range regexp.MustCompile(`(?m)^(?:\[(rank\d+)\]: )?.*msg="kernel threads" .*threads=(\d+)`).FindAllStringSubmatch(text, -1) {
				if m[2] != strconv.Itoa(tc.threads) {
					t.Errorf("%q runs %s kernel threads, want %d", m[1], m[2], tc.threads)
				}
				ranks = append(ranks, m[1])
			}
			want := []string{""} // one worker trains in the launching process
			if tc.workers == 2 {
				want = []string{"rank0", "rank1"}
			}
			slices.Sort(ranks)
			if !slices.Equal(ranks, want) {
				t.Errorf("kernel thread counts reported by %q, want %q; output:\n%s", ranks, want, text)
			}
			if kv := summary(t, stdout.String()); kv["world"] != strconv.Itoa(tc.workers) {
				t.Errorf("summary world=%s, want %d", kv["world"], tc.workers)
			}
			if testing.Verbose() {
				t.Log(text)
			}
		})
	}
}
