package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gotrain/gotrain/distributed/clusterenv"
)

// lookupEnv reads the environment; tests replace it.
var lookupEnv = os.LookupEnv

// newEnvCmd is `gotrain env`.
func newEnvCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "env",
		Short: "Show the job this process belongs to, as a worker would find it",
		Long: `Env prints what a worker started here would find with
dist.Init(ctx, dist.Config{InitMethod: "env://"}): which engine started it
(gotrain run or torchrun, Slurm srun, Open MPI mpirun, MPICH/Intel MPI
mpiexec, a Kubeflow PyTorchJob or TrainJob), the variables it read, and the
rank, world size, local rank, node and master address and port it derived.
Run it where the workers run: srun gotrain env, mpirun gotrain env, or as a
pod's command. Under mpiexec every rank must run it, as rank 0 publishes
its address through the launcher.

When the variables are incomplete or contradict each other it prints one
line naming them and exits with status 1: a worker would fail the same way
rather than train alone.`,
		Example: `  srun -N 2 -n 4 gotrain env
  mpirun -np 2 gotrain env
  RANK=0 WORLD_SIZE=2 MASTER_ADDR=10.0.0.1 MASTER_PORT=29500 gotrain env`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runEnv(cmd.Context(), cmd.OutOrStdout(), lookupEnv)
		},
	}
}

// envRendezvousTimeout bounds the PMI exchange of `gotrain env`.
const envRendezvousTimeout = 30 * time.Second

func runEnv(ctx context.Context, w io.Writer, lookup clusterenv.Lookup) error {
	e, err := clusterenv.Detect(lookup)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, envRendezvousTimeout)
	defer cancel()
	if err := clusterenv.Rendezvous(ctx, &e, lookup); err != nil {
		return err
	}
	writeEnv(w, e)
	return nil
}

// writeEnv prints e as "key: value" lines.
func writeEnv(w io.Writer, e clusterenv.Env) {
	fmt.Fprintf(w, "engine: %s\n", e.Engine)
	vars := make([]string, len(e.Vars))
	for i, v := range e.Vars {
		vars[i] = v.Name + "=" + v.Value
	}
	fmt.Fprintf(w, "variables: %s\n", strings.Join(vars, " "))
	fmt.Fprintf(w, "rank: %d\nworld size: %d\nlocal rank: %d\nlocal world size: %d\n", e.Rank, e.WorldSize, e.LocalRank, e.LocalWorldSize)
	node := "unknown"
	if e.NodeRank >= 0 {
		node = fmt.Sprint(e.NodeRank)
	}
	nodes := "unknown"
	if e.NNodes > 0 {
		nodes = fmt.Sprint(e.NNodes)
	}
	fmt.Fprintf(w, "node rank: %s\nnodes: %s\n", node, nodes)
	switch {
	case e.MasterAddr != "":
		fmt.Fprintf(w, "master: %s (%s)\n", net.JoinHostPort(e.MasterAddr, e.MasterPort), e.MasterFrom)
	case e.WorldSize == 1:
		fmt.Fprintf(w, "master: none (a single process)\n")
	}
	if e.JobID != "" {
		fmt.Fprintf(w, "job id: %s\n", e.JobID)
	}
}
