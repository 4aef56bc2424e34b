// Package localsgd keeps data-parallel replicas consistent by syncing
// their parameters every few steps instead of their gradients every
// step: LocalSGD, DiLoCo and streaming DiLoCo, for any model and any
// inner optimizer.
//
// Each rank trains its own replica with its own optimizer (the inner
// optimizer, whose state stays local) and no gradient communication.
// Every H steps (the h of NewLocalSGD and NewDiLoCo) the replicas meet:
//
//   - LocalSGD (NewLocalSGD) averages the parameters.
//   - DiLoCo (NewDiLoCo) keeps θ_global, a float32 copy of the parameters
//     at the last sync. The outer gradient Δ = θ_global − θ_local is
//     averaged over the ranks, an outer optimizer (by default SGD with
//     learning rate 0.7 and Nesterov momentum 0.9, as in the DiLoCo
//     paper) steps θ_global with Δ as its gradient, and every rank's
//     parameters become the new θ_global.
//   - Streaming DiLoCo (DiLoCo with Fragments > 1) splits the parameters
//     into contiguous fragments of about equal size that sync at
//     staggered steps, H/F apart, so that one fragment at a time is on the
//     wire. Its outer gradient may travel in bfloat16 (BF16) while
//     θ_global stays float32, and its reduction may overlap the next
//     Delay inner steps; the result then merges into the replica as
//     θ = α·θ_local + (1−α)·θ_global (Alpha; 0 replaces).
//
// The sync is the only collective: a training step calls AfterStep after
// its optimizer step, which syncs the fragments that are due. Sync syncs
// everything at once (at the end of training, before evaluating or
// saving a model every rank agrees on), and Contributors is the count the
// average divides by, which a membership layer may lower to the
// replicas that took part.
//
// A membership layer that must agree on each sync before it is applied
// (the fault-tolerant quorum of package ddp/ft) calls Advance instead of
// AfterStep and runs each due sync itself: SetGroup (the replicas
// present), Reduce (which changes nothing of the replica, and lets a
// replica that holds a copy of a peer's state contribute zeros, the
// average then dividing by the replicas that contributed), and Apply or
// Discard.
//
// The Model is checkpoint state (a checkpoint.Stateful, carried in
// TrainingState.CommHook): θ_global, the outer optimizer's momentum, the
// step count and the schedule's place, an outer gradient in flight, and,
// after GatherState, every rank's own parameters and inner optimizer
// state, so that a resumed run continues bit for bit.
package localsgd
