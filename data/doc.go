// Package data feeds training loops: a Dataset of fixed-shape examples, a
// Sampler that orders one epoch's indices, and a Loader that assembles
// batches into reusable buffers, ahead of the loop on a background
// goroutine when a CPU is spare for it (see Prefetch).
//
// DistributedSampler shards a dataset across data-parallel replicas with
// PyTorch's torch.utils.data.distributed.DistributedSampler semantics
// (seed+epoch shuffling, padding by repeating from the start, drop_last,
// rank r takes indices[r:total:replicas]); only the permutation itself
// differs from torch.randperm. Samplers are resumable: State and Restore
// save and restore the position within an epoch as plain, JSON-friendly
// integers, so a job restarted from a checkpoint skips the samples it has
// already trained on.
//
// A typical loop:
//
//	sampler := data.NewDistributedSampler(ds.Len(), worldSize, rank)
//	loader := data.NewLoader(ds, 64, sampler)
//	for epoch := range epochs {
//		sampler.SetEpoch(epoch)
//		for b := range loader.Batches() {
//			// b.X is [n, shape...], b.Y the labels; valid until the body returns.
//		}
//	}
//
// A language model's examples are token sequences with a target per
// position: a SequenceDataset such as TokenWindows, batched by
// NewSequenceLoader into Batch.Inputs and Batch.Targets of [B, T] token
// ids, with the same samplers. A regression's examples have float
// targets: a TargetDataset such as TensorTargetDataset, batched by
// NewTargetLoader into Batch.X and Batch.Target, a [n, target shape...]
// tensor for a loss such as nn.MSE.
//
// Options and errors follow the module's conventions (package
// github.com/gotrain/gotrain).
package data
