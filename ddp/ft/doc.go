// Package ft keeps data-parallel training going when replicas die and
// lets new ones join without a restart, after torchft: the job is R
// replica groups, each with a stable replica ID, coordinated through a
// store served by a process that is not a replica (the launcher's node
// agent).
//
// Every step a replica calls StartStep, does its forward and backward,
// averages its gradients with AllReduce (or AllReduceGrads), and asks
// ShouldCommit:
//
//	for {
//		if err := mgr.StartStep(ctx); err != nil { return err }
//		idx, _ := sampler.Indices(mgr.Step(), mgr.Rank(), mgr.Size())
//		... forward and backward on idx ...
//		mgr.AllReduceGrads(ctx, params) // a failure is recorded, not fatal
//		if ok, err := mgr.ShouldCommit(ctx); err != nil { return err } else if ok {
//			opt.Step()
//		}
//		opt.ZeroGrad()
//	}
//
// # Quorum
//
// StartStep runs one quorum round: every live replica posts its ID, its
// step and the hash of its model and build; the round forms when every
// member of the previous quorum whose heartbeat is within the liveness
// bound has posted (the first round waits for Config.Replicas, at most
// JoinTimeout), and the first replica to see that records the quorum for
// all (compare-and-set in the store). The quorum ID increments whenever
// the membership changes; then every member builds a new process group
// for the quorum (ranks in replica-ID order) and destroys the old one.
// Survivors never restart and never read a checkpoint. Below MinReplicas
// a round waits QuorumTimeout, logging, then fails naming the last
// failure. A replica whose model hash or build differs from the quorum's
// is refused with the reason.
//
// # Failures
//
// A peer that dies mid-step fails the step's collective; that step is
// not committed on any member: each member votes in the store and the
// first verdict recorded (discard as soon as one member failed or died
// without voting, commit once all voted so) is every member's answer. A
// member restarted in place keeps its replica ID, so its heartbeat goes
// on; once it has posted to the next round it counts as dead without a
// vote, and a quorum in which it heals builds a new group.
// Members discard the step's gradients and redo it in the next quorum,
// which drops the dead replica once its heartbeat is older than the
// liveness bound. At most the in-flight step is lost. Discarding rather
// than averaging over the replicas that finished keeps training exact:
// the committed steps are the steps a smaller fault-free job would have
// taken, and every member applies the same update. The average always
// divides by the size of the quorum.
//
// # Healing
//
// A replica that starts with Config.Step = -1 (or behind the others) is
// marked for recovery by the quorum; the member at the quorum's step with
// the lowest replica ID (rotating when the same heal is retried) sends it
// Config.Snapshot's bytes over the new group's data plane, which is
// authenticated as any group is (job token, TLS when configured), with
// their sha256, verified before Config.Load. Members that do not take
// part go on to the step's allreduce and wait there, so they pause for
// the transfer at most. If the transfer fails (the serving peer dies) the
// step is discarded and the next round heals from another member.
//
// # Data
//
// Sampler gives a step-indexed global order: step s consumes global
// batch s, split across the members present at s. Since the step count
// advances only on commit, within an epoch every sample of the epoch's
// whole batches is consumed by exactly one committed step, none skipped
// or repeated; a discarded step's batch was computed but its gradients
// were dropped, and it is consumed again by the next step.
//
// # Outer steps (DiLoCo, LocalSGD)
//
// With DiLoCo or LocalSGD (package ddp/localsgd) the replicas train their
// inner steps alone and meet every H steps, so the quorum is taken at
// the outer step only: before it each replica calls SetStep with its
// inner step, then StartStep, reduces its outer gradient (or its
// parameters) over the quorum's group, and applies the result if
// ShouldCommit says every member's reduction succeeded; otherwise it
// drops it and retries in the next round, without the dead replica.
// A replica that dies during the inner steps costs the survivors only
// its own inner steps and the liveness bound at the next outer step.
// The average is renormalised over the replicas that contributed (the
// sum divided by their count, not by the replicas the job started
// with): the outer step is then the one a job of the survivors would
// take, of the full size, rather than one shrunk by the missing share.
// A replica joins at an outer step and heals there, before the
// reduction; since it holds a copy of its source's replica it sends
// zeros that step and is not counted, and after the step its parameters
// are θ_global, as every member's.
//
// # Several ranks per replica
//
// Here a replica is one process. A replica of several ranks would run an
// intra-replica group (sharded or DDP) beside the quorum's group, which
// would join rank i of every replica (torchft's replicated dimension);
// its rank 0 would post and vote for the replica, and heal streams would
// go rank to rank.
package ft
