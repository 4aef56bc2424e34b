package optim

import (
	"fmt"
	"strconv"

	"github.com/gotrain/gotrain/tensor"
)

// group is one parameter group: torch.optim's param_groups entry, with
// the hyper-parameters a group may set for itself.
type group struct {
	lr, weightDecay float64
	n               int // parameters in the group
	// initialLR is the rate the first scheduler found (torch's
	// "initial_lr"): every scheduler built after it decays from there,
	// not from the rate an earlier one has already set.
	initialLR  float64
	hasInitial bool
}

// LR sets a parameter group's own learning rate (see AddParamGroup);
// constructors take theirs as an argument.
func LR(lr float64) Option {
	return func(c *config) { c.lr, c.hasLR = lr, true; c.Mark("LR") }
}

// AddParamGroup adds params to the optimizer as a new parameter group, as
// torch.optim.Optimizer.add_param_group: the group takes the options LR
// and WeightDecay and otherwise the constructor's learning rate and weight
// decay. The constructor's parameters are group 0. The usual transformer
// recipe is decay on the weight matrices and none on biases and LayerNorm
// weights:
//
//	opt := optim.NewAdamW(matrices, 1e-3, optim.WeightDecay(0.1))
//	opt.AddParamGroup(others, optim.WeightDecay(0))
//
// It panics on a nil parameter, one already in the optimizer, an invalid
// value or another option.
func (c *core) AddParamGroup(params []*tensor.Tensor, opts ...Option) {
	cfg := config{weightDecay: c.defaultWD}.apply(c.kind+".AddParamGroup", opts, "LR", "WeightDecay")
	g := group{lr: c.groups[0].lr, weightDecay: cfg.weightDecay}
	if cfg.hasLR {
		if !validLR(cfg.lr) {
			panic(fmt.Sprintf("optim: %s.AddParamGroup: invalid learning rate %v", c.kind, cfg.lr))
		}
		g.lr = cfg.lr
	}
	c.addGroup(params, g)
}

// NumGroups returns the number of parameter groups.
func (c *core) NumGroups() int { return len(c.groups) }

// GroupLR returns parameter group g's learning rate.
func (c *core) GroupLR(g int) float64 { return c.groups[c.checkGroup(g)].lr }

// SetGroupLR sets parameter group g's learning rate.
func (c *core) SetGroupLR(g int, lr float64) {
	c.checkGroup(g)
	if !validLR(lr) {
		panic(fmt.Sprintf("optim: %s: invalid learning rate %v", c.kind, lr))
	}
	c.groups[g].lr = lr
}

// GroupWeightDecay returns parameter group g's weight decay.
func (c *core) GroupWeightDecay(g int) float64 { return c.groups[c.checkGroup(g)].weightDecay }

func (c *core) checkGroup(g int) int {
	if g < 0 || g >= len(c.groups) {
		panic(fmt.Sprintf("optim: %s: parameter group %d of %d", c.kind, g, len(c.groups)))
	}
	return g
}

// initialLR returns group g's initial learning rate, recording the current
// one as it the first time a scheduler asks.
func (c *core) initialLR(g int) float64 {
	grp := &c.groups[c.checkGroup(g)]
	if !grp.hasInitial {
		grp.initialLR, grp.hasInitial = grp.lr, true
	}
	return grp.initialLR
}

// groupsMeta writes the groups' hyper-parameters: group 0's as "lr" and
// "weight_decay" (the keys of a one-group optimizer), later groups' as
// "param_groups.<g>.lr" and so on.
func (c *core) groupsMeta(meta map[string]string) {
	meta["param_groups"] = strconv.Itoa(len(c.groups))
	for g, grp := range c.groups {
		prefix := ""
		if g > 0 {
			prefix = fmt.Sprintf("param_groups.%d.", g)
			meta[prefix+"params"] = strconv.Itoa(grp.n)
		}
		meta[prefix+"lr"] = formatFloat(grp.lr)
		meta[prefix+"weight_decay"] = formatFloat(grp.weightDecay)
		if grp.hasInitial {
			meta[prefix+"initial_lr"] = formatFloat(grp.initialLR)
		}
	}
}

// parseGroups reads the groups' hyper-parameters from meta, which must
// have c's groups of c's sizes (a state without "param_groups" has one).
func (c *core) parseGroups(meta map[string]string) ([]group, error) {
	n := 1
	if s, ok := meta["param_groups"]; ok {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			return nil, c.stateError("param_groups = %q is not an integer", s)
		}
	}
	if n != len(c.groups) {
		return nil, c.stateError("state has %d parameter groups, optimizer has %d", n, len(c.groups))
	}
	groups := make([]group, n)
	for g := range groups {
		prefix := ""
		if g > 0 {
			prefix = fmt.Sprintf("param_groups.%d.", g)
			size, err := metaInt(meta, prefix+"params")
			if err != nil {
				return nil, c.stateError("%v", err)
			}
			if size != c.groups[g].n {
				return nil, c.stateError("parameter group %d has %d parameters in the state, %d here", g, size, c.groups[g].n)
			}
		}
		var err error
		grp := group{n: c.groups[g].n}
		if grp.lr, err = metaFloat(meta, prefix+"lr"); err != nil {
			return nil, c.stateError("%v", err)
		}
		if grp.weightDecay, err = metaFloat(meta, prefix+"weight_decay"); err != nil {
			return nil, c.stateError("%v", err)
		}
		if _, ok := meta[prefix+"initial_lr"]; ok {
			if grp.initialLR, err = metaFloat(meta, prefix+"initial_lr"); err != nil {
				return nil, c.stateError("%v", err)
			}
			grp.hasInitial = true
		}
		groups[g] = grp
	}
	return groups, nil
}
