package main

import (
	"github.com/spf13/pflag"

	"github.com/gotrain/gotrain/harness"
)

// registerFT defines the fault-tolerance flags of `gotrain train`.
func registerFT(f *pflag.FlagSet, h *harness.Config) {
	f.BoolVar(&h.FT, "ft", false, "fault-tolerant training (under gotrain run, or with --nproc-per-node/--hosts): a worker that dies costs at most the step in flight, the others train on, and the launcher restarts it (--max-restarts times each) to heal from a live peer")
	f.IntVar(&h.MinReplicas, "min-replicas", 0, "with --ft: the fewest live workers that train; below it the job stops with the root cause (default 1)")
}

// checkTrainFT refuses the flags that fault tolerance does not combine
// with, naming both.
func checkTrainFT(f *pflag.FlagSet, h *harness.Config) error {
	switch {
	case h.MinReplicas < 0 || f.Changed("min-replicas") && h.MinReplicas == 0:
		return badFlag("min-replicas", h.MinReplicas, "must be at least 1")
	case f.Changed("min-replicas") && !h.FT:
		return flagNeeds("min-replicas", "needs --ft")
	case !h.FT:
		return nil
	case h.Sharding != "" && h.Sharding != harness.ShardNone:
		return usagef("--ft and --sharding %s: a fault-tolerant worker holds the whole model to heal another; choose one", h.Sharding)
	case h.DiLoCoDelay > 0:
		return usagef("--ft and --diloco-delay %d: a fault-tolerant outer step is agreed before it is applied and cannot overlap inner steps; use --diloco-delay 0", h.DiLoCoDelay)
	case h.OnNaN == harness.OnNaNSkip:
		return usagef("--ft and --on-nan skip: the quorum already commits or discards each step; use stop or warn")
	}
	return nil
}
