package main

import (
	"fmt"

	"github.com/gotrain/gotrain/distributed/clusterenv"
	"github.com/gotrain/gotrain/launch/machine"
)

// workerLayout is how a job uses a machine's CPUs: workers processes of
// threads kernel threads (GOTRAIN_NUM_THREADS) each.
type workerLayout struct {
	workers, threads int
}

// String is the layout as the log line and the help put it.
func (l workerLayout) String() string {
	return fmt.Sprintf("%d workers × %d threads", l.workers, l.threads)
}

// autoLayout is the layout `gotrain train JOB --nproc-per-node auto`
// starts on a machine of cpus CPUs, where fits(n) says whether n workers
// pass the launcher's checks of that machine (memory above all).
//
// Data-parallel workers of one thread each were at least as fast as one
// process running the same CPUs as threads for every built-in model
// measured (AMD EPYC Zen 4, 2 vCPUs, docs/bench/threads.sh, medians of 3
// alternating rounds): the MNIST MLP 42,932 samples/s with 2 workers
// against 33,150 with 2 threads (1.30×), the CNN 2,386 against 2,316
// (1.03×), the GPT 28,011 tokens/s against 25,241 (1.11×). A worker's
// GEMMs, element-wise passes and optimizer run without waiting for other
// threads, and the allreduce of its gradients overlaps backward. So auto starts one worker
// per CPU, each on its own batch (the global batch grows with the
// workers, as under torchrun).
//
// A worker holds a whole replica (weights, gradients, optimizer state,
// activations): where cpus workers do not fit in memory (a large GPT on
// a many-core node), auto starts the most workers of the layouts cpus/t
// workers × t threads that do, each with the CPUs it leaves as threads
// (the launcher gives a worker CPUs÷workers of them). When not even one
// worker fits, it is one worker of all the CPUs, and the launcher's
// memory check says why it does not start.
func autoLayout(cpus int, fits func(workers int) bool) workerLayout {
	cpus = max(cpus, 1)
	for t := 1; t <= cpus; t++ {
		w := cpus / t
		if t > 1 && w == cpus/(t-1) {
			continue // the same worker count as the last one tried
		}
		if fits(w) {
			return workerLayout{workers: w, threads: cpus / w}
		}
	}
	return workerLayout{workers: 1, threads: cpus}
}

// autoWorkers is the layout `--nproc-per-node auto` starts for this job
// on this machine (see autoLayout), its workers checked against the
// machine's readings as check then checks them.
func (fl *trainFlags) autoWorkers() workerLayout {
	r := machine.Read()
	return autoLayout(clusterenv.CPUs(), func(n int) bool {
		return fl.sizeCheck(n).check(r) == nil
	})
}
