package main

import (
	"github.com/spf13/pflag"

	"github.com/gotrain/gotrain/ddp/localsgd"
	"github.com/gotrain/gotrain/harness"
	"github.com/gotrain/gotrain/jobs/jobflag"
)

// registerDataParallel defines the flags that choose how the ranks share
// the training: sharding (ddp/fsdp) or LocalSGD/DiLoCo (ddp/localsgd)
// instead of DDP.
func registerDataParallel(f *pflag.FlagSet, h *harness.Config) {
	f.StringVar(&h.Sharding, "sharding", harness.ShardNone, "shard the training state over the workers instead of replicating it (DDP): none, zero1 (optimizer state), zero2 (and gradients), full (and parameters) or hybrid (full within a node, replicated across nodes); checkpoints go to <--save>.sharded/")
	f.IntVar(&h.LocalSGD, "local-sgd", 0, "LocalSGD: each worker trains on its own and the parameters are averaged every N steps (no gradient allreduce)")
	f.IntVar(&h.DiLoCo, "diloco", 0, "DiLoCo: each worker trains on its own and every N steps an outer Nesterov SGD steps the shared parameters with their averaged change")
	// Unset, they are the paper's (harness.Config's nil and 0), whether
	// or not a process checks the flags.
	lr, mom := localsgd.DefaultOuterLR, localsgd.DefaultOuterMomentum
	f.Var(jobflag.Float(&h.DiLoCoOuterLR, &lr), "diloco-outer-lr", "with --diloco: the outer optimizer's learning rate")
	f.Var(jobflag.Float(&h.DiLoCoOuterMomentum, &mom), "diloco-outer-momentum", "with --diloco: the outer optimizer's Nesterov momentum")
	f.IntVar(&h.DiLoCoFragments, "diloco-fragments", 0, "with --diloco or --local-sgd: sync the parameters in F fragments at staggered steps (streaming DiLoCo; default 1)")
	f.BoolVar(&h.DiLoCoBF16, "diloco-bf16", false, "with --diloco: send the outer gradients as bfloat16 (half the bytes)")
	f.IntVar(&h.DiLoCoDelay, "diloco-delay", 0, "with --diloco: overlap each fragment's reduction with the next N inner steps")
}

// checkDataParallel refuses the data-parallel flags that do not fit
// together, naming both.
func checkDataParallel(f *pflag.FlagSet, h *harness.Config) error {
	if err := checkOneOf("sharding", h.Sharding, harness.ShardNone, harness.ShardZero1, harness.ShardZero2, harness.ShardFull, harness.ShardHybrid); err != nil {
		return err
	}
	sharded := h.Sharding != harness.ShardNone
	local := ""
	for _, name := range []string{"local-sgd", "diloco"} {
		if f.Changed(name) {
			if v := f.Lookup(name).Value.String(); v == "0" || v[0] == '-' {
				return badFlag(name, v, "must be at least 1 (the steps between syncs)")
			}
			if local != "" {
				return usagef("--local-sgd and --diloco: choose one")
			}
			local = name
		}
	}
	if local != "" && sharded {
		return usagef("--sharding %s and --%s: a LocalSGD/DiLoCo worker holds the whole model; choose one", h.Sharding, local)
	}
	if hook := f.Lookup("comm-hook"); hook != nil && hook.Value.String() != "allreduce" {
		switch {
		case sharded:
			return usagef("--sharding %s and --comm-hook %s: sharded training reduce-scatters float32 gradients; leave --comm-hook out", h.Sharding, hook.Value)
		case local != "":
			return usagef("--%s and --comm-hook %s: LocalSGD/DiLoCo reduce no gradients; leave --comm-hook out", local, hook.Value)
		}
	}
	for _, name := range []string{"diloco-outer-lr", "diloco-outer-momentum", "diloco-bf16", "diloco-delay"} {
		if f.Changed(name) && local != "diloco" {
			return flagNeeds(name, "needs --diloco")
		}
	}
	if f.Changed("diloco-fragments") && local == "" {
		return flagNeeds("diloco-fragments", "needs --diloco or --local-sgd")
	}
	switch {
	case h.DiLoCoOuterLR != nil && !(*h.DiLoCoOuterLR > 0):
		return badFlag("diloco-outer-lr", *h.DiLoCoOuterLR, "must be positive")
	case h.DiLoCoOuterMomentum != nil && !(*h.DiLoCoOuterMomentum >= 0 && *h.DiLoCoOuterMomentum < 1):
		return badFlag("diloco-outer-momentum", *h.DiLoCoOuterMomentum, "must be at least 0 and below 1")
	case f.Changed("diloco-fragments") && h.DiLoCoFragments < 1:
		return badFlag("diloco-fragments", h.DiLoCoFragments, "must be at least 1")
	case h.DiLoCoDelay < 0:
		return badFlag("diloco-delay", h.DiLoCoDelay, "must be at least 0")
	}
	return nil
}
