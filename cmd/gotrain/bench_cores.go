package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/gotrain/gotrain/internal/cpu"
)

// newBenchCoresCmd is `gotrain bench cores`.
func newBenchCoresCmd() *cobra.Command {
	var rounds int
	cmd := &cobra.Command{
		Use:   "cores",
		Short: "Measure how long CPUs take to pass data between them",
		Long: `Pin one thread to each of two CPUs and time them passing a cache line to
and fro, for every pair of CPUs this process may run on (Linux only). One
line per pair, then the fastest and slowest pair:

  cpu_a= cpu_b= round_trip_ns=
  pairs= min_ns= max_ns= spread=

CPUs that share a cache answer in tens of nanoseconds; CPUs on different
dies or sockets, or virtual CPUs the host has placed apart, take several
times as long. Threads of one process share each step's data, and slow
down with the slowest pair they run on; DDP workers, separate processes,
share only their gradients once a step. On a machine whose pairs differ
this much, run a worker per group of close CPUs (--nproc-per-node) rather
than threads across all of them. On a virtual machine the placement can
change while it runs: measure before and after a benchmark.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkAtLeast("rounds", rounds, 1); err != nil {
				return err
			}
			cpus, err := cpu.Allowed()
			if err != nil {
				return err
			}
			if len(cpus) < 2 {
				return fmt.Errorf("bench cores: this process may run on one CPU (%s): there is no pair to measure", cpu.FormatList(cpus))
			}
			w := cmd.OutOrStdout()
			var lo, hi time.Duration
			pairs := 0
			for i, a := range cpus {
				for _, b := range cpus[i+1:] {
					rt, err := cpu.MeasureRoundTrip(cmd.Context(), a, b, rounds)
					if err != nil {
						return fmt.Errorf("bench cores: %w", err)
					}
					fmt.Fprintf(w, "cpu_a=%d cpu_b=%d round_trip_ns=%.0f\n", a, b, float64(rt.Time.Nanoseconds()))
					if pairs == 0 || rt.Time < lo {
						lo = rt.Time
					}
					hi = max(hi, rt.Time)
					pairs++
				}
			}
			fmt.Fprintf(w, "pairs=%d min_ns=%.0f max_ns=%.0f spread=%.2f\n", pairs,
				float64(lo.Nanoseconds()), float64(hi.Nanoseconds()), hi.Seconds()/lo.Seconds())
			return nil
		},
	}
	cmd.Flags().IntVar(&rounds, "rounds", 20000, "round trips timed per pair of CPUs")
	return cmd
}
