// Package ddp is gotrain's DistributedDataParallel: it wraps an nn.Module
// so that every rank trains a replica on its own share of the data and the
// replicas stay identical, because each Backward averages the gradients
// across the process group before the optimizer steps.
//
// New checks that all ranks hold the same parameters (names and shapes)
// and copies rank 0's parameters and buffers to every rank. During
// Backward, gradients are packed into buckets (25 MiB, the first 1 MiB,
// parameters in reverse registration order, rebuilt after the first step in
// the order gradients actually became ready). A bucket's allreduce starts
// the moment its last gradient is final — tensor grad hooks tell the
// Reducer — so communication overlaps the rest of backward; Backward
// returns once every bucket is reduced, with the error of a failed
// reduction if any. Nothing hangs: the process group fails fast on a dead
// peer and times out on a stuck one.
//
// The Reducer is a state machine without I/O (it decides "bucket k may
// start" and is told nothing else); one communication goroutine runs the
// comm hook on each launched bucket in order. When no CPU is spare for that
// goroutine, the grad hook runs the comm hook itself instead: the default
// when every rank shares this host and their compute threads fill its CPUs,
// as `gotrain run` arranges (see OverlapComm). The data loader's prefetch
// default follows the same policy, so the plain loop below is the fast
// one. Hooks replace how a bucket is reduced: AllReduceHook (the default),
// FP16CompressHook and BF16CompressHook.
//
// The training loop is PyTorch's:
//
//	pg, err := distributed.Init(ctx, distributed.Config{InitMethod: "env://"})
//	dm, err := ddp.New(ctx, model, pg)
//	opt := optim.NewSGD(dm.Parameters(), 0.01, optim.Momentum(0.9))
//	for batch := range loader.Batches() {
//		opt.ZeroGrad()
//		loss := nn.CrossEntropy(dm.Forward(batch.X), batch.Y)
//		if err := loss.Backward(); err != nil { ... } // gradients are averaged here
//		opt.Step()
//	}
//
// Gradient accumulation: backward passes inside NoSync only accumulate
// locally, and the next synchronised Backward averages the sum.
//
// Uneven inputs: Join (PyTorch's Join, DDP's model.join()) runs a rank's
// loop so that a rank whose data ends first keeps answering the others'
// collectives (buffer broadcasts, and every gradient bucket as zeros
// through the same comm hook) until all ranks have finished; then every
// rank takes the model of the last to finish:
//
//	err := dm.Join(ctx, func(ctx context.Context) error {
//		for batch := range loader.Batches() { ... } // the loop above
//		return nil
//	})
//
// Gradients are averaged over the initial world size (every sample weighs
// the same), or with DivideByInitialWorldSize(false) over the ranks still
// training; ThrowOnEarlyTermination makes every rank fail with
// ErrUnevenInputs at the first uneven step instead. Other components with
// per-step collectives take part by implementing Joinable.
//
// Options and errors follow the module's conventions (package
// github.com/gotrain/gotrain).
package ddp
