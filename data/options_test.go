package data

import (
	"fmt"
	"runtime"
	"strconv"
	"testing"

	"github.com/gotrain/gotrain/internal/kernels"
)

func TestPrefetchDefaultFollowsSpareCPU(t *testing.T) {
	prev := kernels.SetNumThreads(1)
	defer kernels.SetNumThreads(prev)
	cpus := runtime.NumCPU()
	for _, tc := range []struct {
		localWorldSize string
		threads        int
		opts           []Option
		want           int
	}{
		{"", cpus, nil, defaultPrefetch},                         // no launcher: one process
		{"1", cpus, nil, defaultPrefetch},                        // one rank on this host
		{strconv.Itoa(cpus), 1, nil, 0},                          // one rank per CPU
		{"2", cpus, nil, 0},                                      // two ranks, each on every CPU
		{"not-a-number", cpus, nil, defaultPrefetch},             // ignored: read as one rank
		{"2", cpus, []Option{Prefetch(3)}, 3},                    // explicit wins
		{"1", cpus, []Option{Prefetch(0)}, 0},                    // explicit wins
		{strconv.Itoa(2 * cpus), 1, []Option{DropLast(true)}, 0}, // other options keep the default
	} {
		t.Setenv(envLocalWorldSize, tc.localWorldSize)
		kernels.SetNumThreads(tc.threads)
		l := NewLoader(indexDataset(4), 2, NewSequentialSampler(4), tc.opts...)
		if l.cfg.prefetch != tc.want {
			t.Errorf("LOCAL_WORLD_SIZE=%q, %d threads on %d CPUs, %d options: prefetch %d, want %d",
				tc.localWorldSize, tc.threads, cpus, len(tc.opts), l.cfg.prefetch, tc.want)
		}
	}
	if cpus > 2 {
		t.Setenv(envLocalWorldSize, "2")
		kernels.SetNumThreads(1)
		if l := NewLoader(indexDataset(4), 2, NewSequentialSampler(4)); l.cfg.prefetch != defaultPrefetch {
			t.Errorf("two ranks of one thread on %d CPUs: prefetch %d, want %d", cpus, l.cfg.prefetch, defaultPrefetch)
		}
	}
}

func TestConstructorsRejectOthersOptions(t *testing.T) {
	for name, c := range map[string]struct {
		f    func()
		want string
	}{
		"loader shuffle":  {func() { NewLoader(indexDataset(1), 1, NewSequentialSampler(1), Shuffle(false)) }, "data: NewLoader does not take option Shuffle"},
		"loader seed":     {func() { NewLoader(indexDataset(1), 1, NewSequentialSampler(1), Seed(1)) }, "data: NewLoader does not take option Seed"},
		"sampler prefech": {func() { NewDistributedSampler(4, 1, 0, Prefetch(1)) }, "data: NewDistributedSampler does not take option Prefetch"},
		"nil option":      {func() { NewDistributedSampler(4, 1, 0, nil) }, "data: NewDistributedSampler: nil Option"},
	} {
		func() {
			defer func() {
				if r := fmt.Sprint(recover()); r != c.want {
					t.Errorf("%s: recovered %q, want %q", name, r, c.want)
				}
			}()
			c.f()
		}()
	}
}
