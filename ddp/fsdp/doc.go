// Package fsdp is sharded data parallelism for any nn.Module: ZeRO stages
// 1–3 and hybrid sharding with PyTorch FSDP's strategy names, giving the
// same training as ddp.Model (exact up to the order of float32 sums).
//
//	fm, err := fsdp.New(ctx, model, group, fsdp.Strategy(fsdp.FullShard))
//	var decay, other []*tensor.Tensor
//	for _, p := range fm.Parameters() { // this rank's shards
//		if info, _ := fm.ShardOf(p); info.Dim() >= 2 {
//			decay = append(decay, p)
//		} else {
//			other = append(other, p)
//		}
//	}
//	opt := optim.NewAdamW(decay, lr, optim.WeightDecay(0.1))
//	opt.AddParamGroup(other, optim.WeightDecay(0))
//	for … {
//		opt.ZeroGrad()
//		out, err := fm.ForwardErr(x)
//		…
//		err = loss.Backward()            // gradients reduce-scattered into the shards
//		norm, err := fm.ClipGradNorm(1)  // the whole model's norm
//		opt.Step()                       // each rank updates its shards
//	}
//	sd, err := fm.FullStateDict(ctx)    // consolidated, for saving
//
// Sharding is per parameter (FSDP2's layout): each parameter is
// flattened and padded to a multiple of the shard group's size, and rank
// r owns elements [r·c, (r+1)·c). Parameters are communicated by unit, a
// list of submodules (Units; for a GPT each transformer block, plus the
// model for the rest): a unit's gradients are reduced as soon as backward
// has finished with all of them, on the group's communication while
// backward goes on, and with FullShard its full parameters and gradients
// are freed right then.
//
// With FullShard and HybridShard a unit is gathered only while it runs,
// as PyTorch's FSDP2 fully_shard with reshard_after_forward=True: the
// root unit (the model itself: for a GPT the embeddings, tied to the
// output layer, and the final norm) is gathered at the start of Forward
// and kept until its gradients are reduced at the end of backward; every
// other unit is gathered by a forward pre-hook just before its Forward and
// freed right after it, gathered again by a hook on its output just
// before backward reaches it, and freed once its gradients are
// reduce-scattered. With Prefetch, the next unit's gather is in flight
// while a unit computes (forward: the next in forward order; backward:
// the one before), so a step holds the root and at most two other units'
// full parameters (Footprint's PeakGathered). The hooks need the unit's
// module to be run through nn.Call, as models.GPTModel does for its blocks,
// models.ResNet for its residual blocks and nn.Sequential for its children,
// and the unit's parameters to reach the rest of the model only through
// its output. A forward pass without gradients frees each unit after it
// runs and the root at its end; inside a running ddp.Join every unit is
// gathered at the start of Forward, which is what a rank that joined
// shadows.
//
// What a FullShard rank holds besides its shards stays a few units'
// worth, whatever the model's depth: a unit's full gradients live in
// buffers reused every step, from its backward until its reduce-scatter
// is launched; at most two reduce-scatters hold their send buffer at
// once (launching a third waits for the oldest), and each one's result
// is added into the shards as soon as it arrives. Activations are the
// other large part, and the same on every rank: a model that runs its
// units through nn.CallCheckpointed instead of nn.Call (models.GPTModel's
// ActivationCheckpointing) keeps only each unit's input, recomputing the
// unit's forward pass in its backward, on the parameters gathered for it.
// FullStateDictOn consolidates the model on one rank, gathering one unit
// at a time; FullParamsOn hands that rank each unit's parameters as they
// arrive, without a copy, for writing a model file unit by unit.
// Evaluate runs forward passes of the module itself outside training
// (evaluation, sampling) on every rank, the units gathered around their
// Forward as in training and nothing kept for a backward pass.
//
// ShardOptimizer and ShardGradOp keep the full parameters on every rank
// and give the full gradients' storage back once reduced: they differ in
// the reduction (allreduce, as ZeroRedundancyOptimizer, or
// reduce-scatter). The storage is reused every step, lent with
// ShardOptimizer to every parameter as backward starts (as DDP's
// buckets) and with ShardGradOp to a unit's parameters as its backward
// starts (for a unit run through nn.Call), so that only the units being
// reduced hold full gradients.
//
// Among ranks that reduce through a host's shared memory
// (distributed.Group.SharedMemory), whose all-gather and reduce-scatter
// would go through the sockets, both are allreduces: a gather sums
// blocks that are zero but for each rank's own (the same values,
// exactly), and a reduce-scatter keeps this rank's block of the averaged
// gradients (summed as DDP's allreduce sums them). HybridShard's
// reductions stay reduce-scatters.
//
// NoSync (gradient accumulation) keeps full local gradients until the
// next synchronised backward reduces their sum, so it costs a full
// gradient's memory, as in PyTorch; with FullShard the units gathered
// for a NoSync backward also stay gathered until the next Forward.
//
// Sharded checkpoints: ShardedStateDict and OptimizerShardedState return
// pieces {Key, GlobalShape, Offset, Data} that load at any world size
// (LoadShardedStateDict, LoadOptimizerShardedState).
package fsdp
