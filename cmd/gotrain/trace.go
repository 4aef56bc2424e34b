package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gotrain/gotrain/distributed/flightrec"
)

// newTraceCmd is `gotrain trace DIR`: the flight recorder's report.
func newTraceCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "trace DIR",
		Short: "Say where a hung or failed job stopped, from its ranks' flight-recorder dumps",
		Long: `Read the flight_rank<N>.json dumps in DIR (written by every reachable rank
on a failed or timed-out collective, or on SIGUSR1 to the launcher, when
--flight-dir or GOTRAIN_FLIGHT_DIR names DIR) and print which ranks did not
reach which collective, how long the others waited, and where each rank was
last seen:

  default group: rank 1 never entered allreduce #5402 (...); ranks 0, 2, 3 waited 30s`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("trace: want one argument, the directory of the dumps (got %d)", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			dumps, err := flightrec.Load(args[0])
			if err != nil {
				return err
			}
			_, lines := flightrec.Analyze(dumps)
			_, err = fmt.Fprintln(cmd.OutOrStdout(), strings.Join(lines, "\n"))
			return err
		},
	}
}
