package main

import (
	"testing"

	"github.com/gotrain/gotrain/jobs/gptjob"
	"github.com/gotrain/gotrain/jobs/jobflag"
	"github.com/gotrain/gotrain/jobs/mnistjob"
	"github.com/gotrain/gotrain/launch/machine"
)

const gib = int64(1) << 30

// memoryFits is the fits of autoLayout for workers needing per bytes each
// on a machine of cpus CPUs with avail bytes available, through the
// launcher's own size check.
func memoryFits(cpus int, per, avail int64) func(int) bool {
	r := machine.Resources{CPUs: cpus, MemAvailable: avail, MemSource: "test", NoFile: 1 << 20}
	return func(n int) bool {
		return sizeCheck{nproc: n, nprocFlag: "auto", world: n, mesh: true, memory: jobflag.Memory{Bytes: per, Parts: "test"}}.check(r) == nil
	}
}

func TestAutoLayout(t *testing.T) {
	for _, tc := range []struct {
		name       string
		cpus       int
		per, avail int64
		want       workerLayout
	}{
		{"one CPU", 1, gib / 4, 8 * gib, workerLayout{1, 1}},
		{"two CPUs", 2, gib / 4, 8 * gib, workerLayout{2, 1}},
		{"64 CPUs, memory for all", 64, gib / 4, 64 * gib, workerLayout{64, 1}},
		// 64 and 32 workers need 64 and 32 GiB; 21 × 3 threads fit in 24.
		{"64 CPUs, memory for 24", 64, gib, 24 * gib, workerLayout{21, 3}},
		// 12 and 6 do not fit in 5 GiB; 4 × 3 do.
		{"12 CPUs, memory for 5", 12, gib, 5 * gib, workerLayout{4, 3}},
		// 11 CPUs: 5 workers (of 2 threads) do not fit in 4 GiB, 3 do,
		// and the launcher gives each 11÷3 = 3 threads.
		{"11 CPUs, memory for 4", 11, gib, 4 * gib, workerLayout{3, 3}},
		{"memory for one", 64, 10 * gib, 12 * gib, workerLayout{1, 64}},
		// Not even one worker fits: one, for the launcher's check to refuse.
		{"memory for none", 8, 100 * gib, 12 * gib, workerLayout{1, 8}},
		{"no CPU count", 0, gib, 8 * gib, workerLayout{1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := autoLayout(tc.cpus, memoryFits(tc.cpus, tc.per, tc.avail)); got != tc.want {
				t.Errorf("autoLayout(%d CPUs, %d MiB per worker, %d MiB available) = %v, want %v",
					tc.cpus, tc.per>>20, tc.avail>>20, got, tc.want)
			}
		})
	}
}

// TestAutoLayoutJobs checks the layouts of the built-in jobs' own
// memory estimates: the most workers that fit, with the CPUs they leave
// as threads, and never more than the CPUs.
func TestAutoLayoutJobs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mem   jobflag.Memory
		cpus  int
		avail int64
	}{
		{"mnist mlp", (&mnistjob.Config{}).MemoryEstimate(), 64, 32 * gib},
		{"mnist cnn", (&mnistjob.Config{Model: "cnn"}).MemoryEstimate(), 64, 32 * gib},
		{"gpt default", (&gptjob.Config{}).MemoryEstimate(), 64, 32 * gib},
		{"gpt2", (&gptjob.Config{Preset: "gpt2"}).MemoryEstimate(), 64, 128 * gib},
		{"gpt2 small machine", (&gptjob.Config{Preset: "gpt2"}).MemoryEstimate(), 8, 32 * gib},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fits := memoryFits(tc.cpus, tc.mem.Bytes, tc.avail)
			got := autoLayout(tc.cpus, fits)
			if got.workers < 1 || got.workers > tc.cpus || got.threads != tc.cpus/got.workers {
				t.Fatalf("%v on %d CPUs: want 1 to %d workers of CPUs÷workers threads", got, tc.cpus, tc.cpus)
			}
			if !fits(got.workers) && got.workers > 1 {
				t.Errorf("%v: %d workers of %d MiB do not fit in %d MiB", got, got.workers, tc.mem.Bytes>>20, tc.avail>>20)
			}
			// No layout of more workers (cpus/t for a smaller t) fits.
			for th := 1; tc.cpus/th > got.workers; th++ {
				if fits(tc.cpus / th) {
					t.Errorf("%v: %d workers of %d threads fit too", got, tc.cpus/th, th)
				}
			}
			t.Logf("%d MiB per worker, %d CPUs, %d GiB: %v", tc.mem.Bytes>>20, tc.cpus, tc.avail/gib, got)
		})
	}
}
