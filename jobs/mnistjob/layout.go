package mnistjob

// ThreadsPerWorker is the number of kernel threads per worker at which
// this job trains fastest on a machine with CPUs to spare, the layout
// `gotrain train --nproc-per-node auto` starts. Measured on 2 AMD EPYC
// Zen 4 CPUs (docs/bench/threads.sh, four runs): one process of 2
// threads trained the MLP at 48,350 samples/s and 2 workers of one
// thread at 45,130 (the means of the runs' medians), so it takes 2; the
// CNNs, whose second worker gains more than a second thread (2,460
// against 2,316), take 1.
func (c Config) ThreadsPerWorker() int {
	if c.withDefaults().Model == "mlp" {
		return 2
	}
	return 1
}
