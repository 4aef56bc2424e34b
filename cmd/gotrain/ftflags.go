package main

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/gotrain/gotrain/launch"
	"github.com/gotrain/gotrain/launch/fanout"
)

// ftFlags are the fault-tolerance flags of `gotrain run`.
type ftFlags struct {
	on          bool
	join        bool
	minReplicas int
}

// register defines the flags on f.
func (o *ftFlags) register(f *pflag.FlagSet) {
	f.BoolVar(&o.on, "ft", false, "fault-tolerant job: a failed worker is restarted alone (up to --max-restarts times each) and heals from a live peer while the others keep training; implied by `PROGRAM train ... --ft`")
	f.IntVar(&o.minReplicas, "min-replicas", 0, "with --ft: the fewest live workers the job trains with; below it, with no restart left, the job stops with the root cause (default 1)")
	f.BoolVar(&o.join, "ft-join", false, "with --ft on one node of a --nnodes job: this node's workers join the running job (replacing a lost node) and heal from a live peer")
}

// enabled reports whether the job is fault-tolerant: --ft, or a gotrain
// job given --ft (`gotrain run ... gotrain train mnist --ft`), whose
// workers need the launcher's policy and store to survive a failure.
func (o ftFlags) enabled(args []string) bool {
	return o.on || jobWantsFT(args)
}

// jobWantsFT reports whether args (PROGRAM and its arguments) run
// `train` with --ft.
func jobWantsFT(args []string) bool {
	if len(args) < 2 || args[1] != "train" {
		return false
	}
	for _, a := range args[2:] {
		if a == "--" {
			return false
		}
		if a == "--ft" || a == "--ft=true" {
			return true
		}
	}
	return false
}

// check refuses the flags that do not go together.
func (o ftFlags) check(f *pflag.FlagSet, args []string, hosts bool) error {
	ft := o.enabled(args)
	switch {
	case o.minReplicas < 0:
		return badFlag("min-replicas", o.minReplicas, "must be at least 1")
	case f.Changed("min-replicas") && !ft:
		return flagNeeds("min-replicas", "needs --ft")
	case o.join && !ft:
		return flagNeeds("ft-join", "needs --ft")
	case o.join && hosts:
		return flagNeeds("ft-join", "is for a node started by hand (gotrain run --nnodes N --node-rank R); --hosts starts every node itself")
	}
	return nil
}

// apply sets cfg's fault-tolerance fields.
func (o ftFlags) apply(cfg *launch.Config, args []string) {
	cfg.FT, cfg.MinReplicas, cfg.FTJoin = o.enabled(args), o.minReplicas, o.join
}

// applyHosts sets a job on several hosts' fault-tolerance fields.
func (o ftFlags) applyHosts(cfg *fanout.Config, args []string, world int) error {
	cfg.FT, cfg.MinReplicas = o.enabled(args), o.minReplicas
	if o.minReplicas > world {
		return badFlag("min-replicas", o.minReplicas, fmt.Sprintf("is more than the %d workers of the job", world))
	}
	return nil
}
