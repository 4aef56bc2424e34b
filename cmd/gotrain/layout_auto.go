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
// starts on a machine of cpus CPUs for a job that trains fastest with
// threads kernel threads per worker (see threadsPerWorker), where fits(n)
// says whether n workers pass the launcher's checks of that machine
// (memory above all).
//
// It starts cpus/threads workers of threads threads each, every worker on
// its own batch (the global batch grows with the workers, as under
// torchrun). A worker holds a whole replica (weights, gradients,
// optimizer state, activations): where that many workers do not fit in
// memory (a large GPT on a many-core node), auto starts the most workers
// of the layouts cpus/t workers × t threads (t ≥ threads) that do, each
// with the CPUs it leaves as threads (the launcher gives a worker
// CPUs÷workers of them). When not even one worker fits, it is one worker
// of all the CPUs, and the launcher's memory check says why it does not
// start.
func autoLayout(cpus, threads int, fits func(workers int) bool) workerLayout {
	cpus = max(cpus, 1)
	for t := min(max(threads, 1), cpus); t <= cpus; t++ {
		w := cpus / t
		if t > threads && w == cpus/(t-1) {
			continue // the same worker count as the last one tried
		}
		if fits(w) {
			return workerLayout{workers: w, threads: cpus / w}
		}
	}
	return workerLayout{workers: 1, threads: cpus}
}

// threadsPerWorker is the kernel threads per worker at which job trains
// fastest: its ThreadsPerWorker method's, or 1. Data-parallel workers of
// one thread each were faster than one process running the same CPUs as
// threads for every built-in model but the MNIST MLP (AMD EPYC Zen 4, 2
// vCPUs, docs/bench/threads.sh 3): the CNN 2,460 samples/s against
// 2,316 and the GPT 31,507 tokens/s against 30,682, since a worker's
// GEMMs, element-wise passes and optimizer run without waiting for other
// threads and the allreduce of its gradients overlaps backward; the
// MLP's batch-64 GEMMs split over 2 threads gain more than a second
// worker (48,350 against 45,130 samples/s, four runs).
func threadsPerWorker(job jobConfig) int {
	if p, ok := job.(interface{ ThreadsPerWorker() int }); ok {
		return max(p.ThreadsPerWorker(), 1)
	}
	return 1
}

// autoWorkers is the layout `--nproc-per-node auto` starts for this job
// on this machine (see autoLayout), its workers checked against the
// machine's readings as check then checks them.
func (fl *trainFlags) autoWorkers() workerLayout {
	r := machine.Read()
	return autoLayout(clusterenv.CPUs(), threadsPerWorker(fl.job), func(n int) bool {
		return fl.sizeCheck(n).check(r) == nil
	})
}
