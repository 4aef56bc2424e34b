package harness

import (
	"context"
	"fmt"

	"github.com/gotrain/gotrain/ddp/localsgd"
	"github.com/gotrain/gotrain/event"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// startLocal makes the LocalSGD or DiLoCo replica of the model Wrap was
// given, once the optimizer that steps it is known (l.State.Optimizer,
// whose per-rank state its checkpoints carry), and sets it as
// l.State.CommHook so that checkpoints save its state. Every rank calls
// it, before resuming.
func (r *Run) startLocal(ctx context.Context, l *Loop) error {
	if r.localModule == nil || r.lm != nil {
		return nil
	}
	c := r.cfg
	opts := []localsgd.Option{localsgd.InnerOptimizer(l.State.Optimizer)}
	if c.DiLoCoFragments > 0 {
		opts = append(opts, localsgd.Fragments(c.DiLoCoFragments))
	}
	var lm *localsgd.Model
	var err error
	var g localsgd.Group = r.pg
	if r.ft != nil {
		g = noQuorum{} // each outer step's quorum brings its group
	}
	if c.DiLoCo > 0 {
		opts = append(opts, localsgd.BF16(c.DiLoCoBF16), localsgd.Delay(c.DiLoCoDelay))
		if c.DiLoCoOuterLR != nil || c.DiLoCoOuterMomentum != nil {
			lr, mom := localsgd.DefaultOuterLR, localsgd.DefaultOuterMomentum
			if c.DiLoCoOuterLR != nil {
				lr = *c.DiLoCoOuterLR
			}
			if c.DiLoCoOuterMomentum != nil {
				mom = *c.DiLoCoOuterMomentum
			}
			opts = append(opts, localsgd.OuterOptimizer(func(params []*tensor.Tensor) optim.Optimizer {
				return optim.NewSGD(params, lr, optim.Momentum(mom), optim.Nesterov(true))
			}))
		}
		lm, err = localsgd.NewDiLoCo(ctx, r.localModule, g, c.DiLoCo, opts...)
	} else {
		lm, err = localsgd.NewLocalSGD(ctx, r.localModule, g, c.LocalSGD, opts...)
	}
	if err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	r.lm = lm
	l.State.CommHook = lm
	return nil
}

// syncName is the summary's sync=… value: "localsgd:H" or "diloco:H".
func (r *Run) syncName() string {
	if r.cfg.DiLoCo > 0 {
		return fmt.Sprintf("diloco:%d", r.cfg.DiLoCo)
	}
	return fmt.Sprintf("localsgd:%d", r.cfg.LocalSGD)
}

// summariseRun adds the run's data-parallel mode to rank 0's summary:
// the sharding strategy, or the local-SGD period and the bytes rank 0
// sent syncing (in all and per sample or token it trained on), and
// every rank's peak RSS.
func (r *Run) summariseRun(s *event.Summary) {
	if r.fm != nil {
		s.Add("sharding", "%s", r.cfg.Sharding)
	}
	if r.lm != nil {
		s.Add("sync", "%s", r.syncName())
		s.Add("sync_sent_mib", "%.2f", float64(r.lm.Stats().SentBytes)/(1<<20))
		if r.tokens > 0 {
			unit := "sample"
			if r.countsTokens {
				unit = "token"
			}
			s.Add("sync_bytes_per_"+unit, "%.3g", float64(r.lm.Stats().SentBytes)/float64(r.tokens))
		}
	}
	if len(r.rss) > 0 {
		v := ""
		for i, m := range r.rss {
			if i > 0 {
				v += "/"
			}
			v += fmt.Sprint(m)
		}
		s.Add("peak_rss_mib_ranks", "%s", v)
	}
}
