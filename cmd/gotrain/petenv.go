package main

import (
	"strings"

	"github.com/spf13/pflag"
)

// PETPrefix starts the environment variables that give `gotrain run`
// flags, as torchrun reads them: PET_NPROC_PER_NODE is --nproc-per-node.
// A Kubeflow PyTorchJob or TrainJob sets PET_NNODES, PET_NODE_RANK,
// PET_NPROC_PER_NODE, PET_MASTER_ADDR and PET_MASTER_PORT, so a pod's
// command can be `gotrain run PROGRAM` and nothing more.
const PETPrefix = "PET_"

// petName is the variable that gives flag name: PET_ and the name in
// upper case with '-' as '_'.
func petName(name string) string {
	return PETPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// applyPETEnv sets every flag of f not given on the command line from its
// PET_ variable, if set; a value the flag refuses is a usage error naming
// the variable. --run-id also reads PET_RDZV_ID, torchrun's name.
func applyPETEnv(f *pflag.FlagSet, lookup func(string) (string, bool)) error {
	var err error
	f.VisitAll(func(fl *pflag.Flag) {
		if err != nil || fl.Changed || fl.Name == "help" {
			return
		}
		names := []string{petName(fl.Name)}
		if fl.Name == "run-id" {
			names = append(names, petName("rdzv-id"))
		}
		for _, n := range names {
			v, ok := lookup(n)
			if !ok {
				continue
			}
			if serr := f.Set(fl.Name, v); serr != nil {
				err = usagef("run: %s=%s (for --%s): %v", n, showValue(v), fl.Name, serr)
			}
			return
		}
	})
	return err
}
