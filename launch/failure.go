package launch

import (
	"context"
	"syscall"
	"time"

	"github.com/gotrain/gotrain/event"
)

// failed is what the launcher saw of one failed worker of an attempt.
type failed struct {
	w       *worker
	at      time.Time      // when it exited, or was seen stopped
	stopped syscall.Signal // the signal that had stopped it, or 0
	ours    bool           // it ended after the launcher stopped it
}

// watch watches the started workers until they all succeed, the attempt
// fails, or ctx ends, and leaves none running.
//
// A primary failure (a worker's own error or signal, see Failure) stops
// the others at once. A secondary one, a worker that exited with
// event.ExitPeer because another rank failed, gives the rank that failed
// first up to StopTimeout to report its own failure before the others are
// stopped: the fallout often reaches the launcher before its cause. A
// worker stopped by a signal (SIGSTOP) is a primary failure too, found
// when another fails.
func (j *job) watch(ctx context.Context, workers []*worker, exits chan exitEvent, restart int) outcome {
	var (
		out      outcome
		fails    []*failed
		grace    <-chan time.Time
		stopping bool
	)
	noteStopped := func() bool {
		found := false
		for _, w := range workers {
			if w.exited {
				continue
			}
			if sig := stopSignalOf(w.pid()); sig != 0 && !hasFailed(fails, w) {
				fails = append(fails, &failed{w: w, at: time.Now(), stopped: sig})
				found = true
			}
		}
		return found
	}
	stopAll := func() {
		if stopping {
			return
		}
		stopping = true
		noteStopped()
		// Reported once the job ends or restarts, with the others stopped.
		j.stop(workers, exits, syscall.SIGTERM)
		for _, w := range workers {
			if w.exited && w.code != 0 && !hasFailed(fails, w) {
				fails = append(fails, &failed{w: w, at: time.Now(), ours: true})
			}
		}
	}
	// exited records a worker's exit and reports whether it failed; the
	// first failure goes to OnWorkerFailure at once.
	exited := func(ev exitEvent) bool {
		w := workers[ev.idx]
		w.exited, w.code = true, ev.code
		if ev.code == 0 {
			return false
		}
		first := len(fails) == 0
		fails = append(fails, &failed{w: w, at: time.Now()})
		if first && j.cfg.OnWorkerFailure != nil {
			w.awaitOutput(time.Now().Add(drainWait))
			f := j.failure(w, restart)
			f.Time = fails[0].at
			j.cfg.OnWorkerFailure(f)
		}
		return true
	}
	for running := len(workers); running > 0 && out.interrupted == 0 && !stopping; {
		select {
		case <-ctx.Done():
			// Exits already queued came before the interruption: a
			// worker that failed on its own is still reported (an agent
			// stopped by its launcher sends it as its node's failure).
			for queued := true; queued && running > 0; {
				select {
				case ev := <-exits:
					exited(ev)
					running--
				default:
					queued = false
				}
			}
			out.interrupted = StopSignal(ctx)
			j.log.Warn("launch: interrupted, stopping workers", "signal", out.interrupted.String(), "cause", context.Cause(ctx))
			j.stop(workers, exits, out.interrupted)
		case <-grace:
			stopAll()
		case ev := <-exits:
			running--
			if !exited(ev) {
				continue
			}
			if ev.code != event.ExitPeer || noteStopped() {
				stopAll()
			} else if grace == nil {
				t := time.NewTimer(j.cfg.StopTimeout)
				defer t.Stop()
				grace = t.C
			}
		}
	}
	if len(fails) > 0 {
		stopAll() // every worker failed, all of them secondary
	}
	if out.interrupted == 0 && len(fails) == 0 {
		// All exited 0; children they left in their process groups go too.
		j.stop(workers, exits, syscall.SIGTERM)
	}
	finishOutput(workers)
	if out.interrupted == 0 && len(fails) > 0 {
		out.root, out.failed = j.rootCause(fails, restart)
	}
	return out
}

// rootCause is the attempt's root-cause report (see RootCause) and the
// worker whose exit code the job exits with: the root cause's, or the
// first failed worker's when the root cause is a rank of another node.
func (j *job) rootCause(fails []*failed, restart int) (*Failure, *worker) {
	fs := make([]Failure, len(fails))
	for i, fl := range fails {
		fs[i] = j.failure(fl.w, restart)
		fs[i].Time, fs[i].Stopped = fl.at, fl.stopped
		if fl.ours && fl.stopped == 0 {
			fs[i].Secondary = true
		}
	}
	root, _ := RootCause(fs)
	for _, fl := range fails {
		if fl.w.rank == root.Rank && root.PID != 0 {
			return &root, fl.w
		}
	}
	return &root, fails[0].w
}

func hasFailed(fails []*failed, w *worker) bool {
	for _, f := range fails {
		if f.w == w {
			return true
		}
	}
	return false
}

// report is the attempt's root cause after restarts restarts.
func (o outcome) report(restarts, maxRestarts int) Failure {
	f := *o.root
	f.Restarts, f.MaxRestarts = restarts, maxRestarts
	return f
}
