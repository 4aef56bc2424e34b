package launch

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/gotrain/gotrain/launch/rendezvous"
)

// errReform is the cause with which an elastic attempt's context ends
// when the group must re-form.
var errReform = errors.New("launch: the group re-forms")

// runElastic is the loop of an elastic job: wait for a round of the
// rendezvous, run the node's workers with that round's ranks, and watch
// beside them for a change of membership; when one comes (a node lost or
// arrived) or a worker fails, stop the workers and re-form. Only failures
// count against MaxRestarts, and the count is the group's, kept in the
// rendezvous, so every node agrees on it.
func (j *job) runElastic(ctx context.Context) (int, error) {
	rz := j.cfg.Rendezvous
	allow, _ := lookupEnv(orEnviron(j.cfg.Env), EnvAllowLoopback)
	for {
		if ctx.Err() != nil {
			return j.interrupted(ctx, StopSignal(ctx))
		}
		j.log.Info("launch: waiting for the rendezvous", "node", rz.NodeID(), "run_id", j.cfg.RunID)
		rd, err := rz.Next(ctx)
		switch {
		case errors.Is(err, rendezvous.ErrComplete):
			j.log.Info("launch: the job is already complete; nothing to do", "run_id", j.cfg.RunID)
			return 0, nil
		case errors.Is(err, rendezvous.ErrFailed):
			return 1, fmt.Errorf("launch: the job failed on another node, its group out of restarts (--max-restarts %d; that node reports why)", j.cfg.MaxRestarts)
		case ctx.Err() != nil:
			return j.interrupted(ctx, StopSignal(ctx))
		case err != nil:
			return 1, err
		}
		if rd.Failures > j.cfg.MaxRestarts {
			return 1, fmt.Errorf("launch: the group failed %d times, more than --max-restarts %d (the failing node reports why)", rd.Failures, j.cfg.MaxRestarts)
		}
		addr, port := rd.Master()
		if err := CheckMasterAddr(addr, rd.NNodes(), allow == "1"); err != nil {
			return 1, fmt.Errorf("%w: rendezvous round %d: node rank 0's address %q: %w", ErrConfig, rd.Number, addr, err)
		}
		j.place(rd)
		j.log.Info("launch: starting workers",
			"program", j.cfg.Program, "round", rd.Number, "node_rank", rd.NodeRank, "nnodes", rd.NNodes(),
			"nproc_per_node", j.cfg.NProcPerNode, "world_size", rd.NNodes()*j.cfg.NProcPerNode,
			"master_addr", addr, "master_port", port, "run_id", j.cfg.RunID, "restart_count", rd.Failures, "why", rd.Why)

		actx, cancel := context.WithCancelCause(ctx)
		watched := make(chan struct{})
		var change rendezvous.Change
		var werr error
		go func() {
			defer close(watched)
			change, werr = rz.Watch(actx, rd)
			if werr == nil {
				cancel(errReform)
			} else if actx.Err() == nil {
				cancel(werr)
			}
		}()
		out, err := j.attempt(actx, rd.Failures)
		cancel(nil)
		<-watched
		switch {
		case err != nil:
			return 1, err
		case ctx.Err() != nil:
			return j.interrupted(ctx, StopSignal(ctx))
		case werr != nil && !errors.Is(werr, context.Canceled):
			return 1, werr
		case out.interrupted != 0:
			j.log.Warn("launch: membership changed; stopped the workers to re-form the group",
				"round", rd.Number, "reason", change.Reason.String(), "why", change.Why)
		case out.failed == nil:
			done, err := rz.Complete(ctx, rd)
			if err != nil {
				return 1, err
			}
			if done {
				j.log.Info("launch: all workers finished", "round", rd.Number, "restart_count", rd.Failures)
				return 0, nil
			}
			j.log.Info("launch: the group re-formed as the workers finished; joining the next round", "round", rd.Number)
		default:
			failures, complete, err := rz.End(ctx, rd, true)
			if err != nil {
				return 1, err
			}
			if complete || failures > j.cfg.MaxRestarts {
				// Out of restarts (the others stop too), or the other
				// nodes finished the job while this one's workers failed.
				if !complete {
					if err := rz.Fail(ctx); err != nil {
						j.log.Warn("launch: could not tell the other nodes that the job failed", "err", err)
					}
				}
				j.reportFailure(out.report(rd.Failures, j.cfg.MaxRestarts))
				return out.failed.code, nil
			}
			// The wait before re-joining is the group's too: the next
			// round forms without this node or once it is back.
			delay := RestartDelay(j.cfg.RestartBackoff, j.cfg.MaxRestartBackoff, failures)
			j.log.Warn(fmt.Sprintf("launch: a worker failed; re-forming the group in %v (restart %d of %d)", delay, failures, j.cfg.MaxRestarts),
				"failed_rank", out.failed.rank, "exit_code", out.failed.code, "cause", describeExit(out.failed.code),
				"restart_count", failures, "max_restarts", j.cfg.MaxRestarts, "delay", delay)
			if !sleepCtx(ctx, delay) {
				return j.interrupted(ctx, StopSignal(ctx))
			}
		}
	}
}

// place sets the node's share of round rd, for the workers' environment.
func (j *job) place(rd rendezvous.Round) {
	addr, port := rd.Master()
	for _, c := range []*Config{&j.cfg, &j.env.cfg} {
		c.NNodes, c.NodeRank, c.MasterAddr, c.MasterPort = rd.NNodes(), rd.NodeRank, addr, port
	}
	j.round = rd.Number
}

// orEnviron is env, or the process's environment if env is nil.
func orEnviron(env []string) []string {
	if env == nil {
		return os.Environ()
	}
	return env
}
