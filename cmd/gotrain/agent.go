package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/gotrain/gotrain/launch/agent"
)

// newAgentCmd is `gotrain agent`, the node side of `gotrain run --hosts`:
// the launcher starts it on each host over ssh and speaks to it on stdin
// and stdout, so it is hidden from the help.
func newAgentCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "agent",
		Short:  "Run one node of a job launched with --hosts (started by the launcher over ssh)",
		Hidden: true,
		Args:   noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// SIGHUP too: a closed ssh session may send it. The workers are
			// stopped either way before the agent exits.
			ctx, stop := signal.NotifyContext(context.WithoutCancel(cmd.Context()), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
			defer stop()
			return agent.Run(ctx, os.Stdin, os.Stdout, nil)
		},
	}
}
