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
// Forward gathers the full parameters of every unit before running the
// module, all gathers in flight at once (Prefetch): gotrain modules have
// no forward pre-hooks, so a unit cannot be gathered in the middle of its
// parent's Forward. FullShard therefore saves memory between steps and
// during backward (units are freed as backward passes them), but a
// forward pass holds the whole model's parameters, like PyTorch's FSDP
// with reshard_after_forward=False.
//
// ShardOptimizer and ShardGradOp keep the full parameters on every rank
// and free the full gradients once reduced: they differ in the reduction
// (allreduce, as ZeroRedundancyOptimizer, or reduce-scatter). NoSync
// (gradient accumulation) keeps full local gradients until the next
// synchronised backward reduces their sum, so it costs a full gradient's
// memory, as in PyTorch.
//
// Sharded checkpoints: ShardedStateDict and OptimizerShardedState return
// pieces {Key, GlobalShape, Offset, Data} that load at any world size
// (LoadShardedStateDict, LoadOptimizerShardedState).
package fsdp
