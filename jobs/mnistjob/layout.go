package mnistjob

// ThreadsPerWorker is the number of kernel threads per worker at which
// this job trains fastest on a machine with CPUs to spare, the layout
// `gotrain train --nproc-per-node auto` starts. Measured on 2 AMD EPYC
// Zen 4 CPUs (docs/bench/threads.sh): the MLP's batch-64 step ran 1.84×
// as fast on 2 threads as on one, while 2 workers of one thread gave
// 1.61×, so it takes 2; the CNNs, whose second worker gains as much as a
// second thread or more, take 1.
func (c Config) ThreadsPerWorker() int {
	if c.withDefaults().Model == "mlp" {
		return 2
	}
	return 1
}
