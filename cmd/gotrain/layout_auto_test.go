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
		threads    int // the job's fastest threads per worker
		per, avail int64
		want       workerLayout
	}{
		{"one CPU", 1, 1, gib / 4, 8 * gib, workerLayout{1, 1}},
		{"two CPUs", 2, 1, gib / 4, 8 * gib, workerLayout{2, 1}},
		{"64 CPUs, memory for all", 64, 1, gib / 4, 64 * gib, workerLayout{64, 1}},
		// 64 and 32 workers need 64 and 32 GiB; 21 × 3 threads fit in 24.
		{"64 CPUs, memory for 24", 64, 1, gib, 24 * gib, workerLayout{21, 3}},
		// 12 and 6 do not fit in 5 GiB; 4 × 3 do.
		{"12 CPUs, memory for 5", 12, 1, gib, 5 * gib, workerLayout{4, 3}},
		// 11 CPUs: 5 workers (of 2 threads) do not fit in 4 GiB, 3 do,
		// and the launcher gives each 11÷3 = 3 threads.
		{"11 CPUs, memory for 4", 11, 1, gib, 4 * gib, workerLayout{3, 3}},
		{"memory for one", 64, 1, 10 * gib, 12 * gib, workerLayout{1, 64}},
		// Not even one worker fits: one, for the launcher's check to refuse.
		{"memory for none", 8, 1, 100 * gib, 12 * gib, workerLayout{1, 8}},
		{"no CPU count", 0, 1, gib, 8 * gib, workerLayout{1, 1}},
		// A job fastest at 2 threads per worker (the MNIST MLP).
		{"two CPUs, 2 threads", 2, 2, gib / 4, 8 * gib, workerLayout{1, 2}},
		{"64 CPUs, 2 threads", 64, 2, gib / 4, 64 * gib, workerLayout{32, 2}},
		{"one CPU, 2 threads", 1, 2, gib / 4, 8 * gib, workerLayout{1, 1}},
		// One worker of 2 threads leaves the third CPU to it as a thread.
		{"3 CPUs, 2 threads", 3, 2, gib / 4, 8 * gib, workerLayout{1, 3}},
		// 32 workers need 32 GiB; 21 × 3 threads fit in 24.
		{"64 CPUs, 2 threads, memory for 24", 64, 2, gib, 24 * gib, workerLayout{21, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := autoLayout(tc.cpus, tc.threads, memoryFits(tc.cpus, tc.per, tc.avail)); got != tc.want {
				t.Errorf("autoLayout(%d CPUs, %d threads, %d MiB per worker, %d MiB available) = %v, want %v",
					tc.cpus, tc.threads, tc.per>>20, tc.avail>>20, got, tc.want)
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
		job   jobConfig
		cpus  int
		avail int64
	}{
		{"mnist mlp", &mnistjob.Config{}, 64, 32 * gib},
		{"mnist cnn", &mnistjob.Config{Model: "cnn"}, 64, 32 * gib},
		{"gpt default", &gptjob.Config{}, 64, 32 * gib},
		{"gpt2", &gptjob.Config{Preset: "gpt2"}, 64, 128 * gib},
		{"gpt2 small machine", &gptjob.Config{Preset: "gpt2"}, 8, 32 * gib},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := tc.job.MemoryEstimate()
			threads := threadsPerWorker(tc.job)
			fits := memoryFits(tc.cpus, mem.Bytes, tc.avail)
			got := autoLayout(tc.cpus, threads, fits)
			if got.workers < 1 || got.workers > tc.cpus || got.threads != tc.cpus/got.workers {
				t.Fatalf("%v on %d CPUs: want 1 to %d workers of CPUs÷workers threads", got, tc.cpus, tc.cpus)
			}
			if !fits(got.workers) && got.workers > 1 {
				t.Errorf("%v: %d workers of %d MiB do not fit in %d MiB", got, got.workers, mem.Bytes>>20, tc.avail>>20)
			}
			// No layout of more workers (cpus/t for a smaller t) fits.
			if got.threads < min(threads, tc.cpus) {
				t.Errorf("%v: fewer threads than the job's %d", got, threads)
			}
			for th := threads; tc.cpus/th > got.workers; th++ {
				if fits(tc.cpus / th) {
					t.Errorf("%v: %d workers of %d threads fit too", got, tc.cpus/th, th)
				}
			}
			t.Logf("%d MiB per worker, %d CPUs, %d GiB: %v", mem.Bytes>>20, tc.cpus, tc.avail/gib, got)
		})
	}
}
