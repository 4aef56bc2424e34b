package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/gotrain/gotrain/launch/preflight"
)

// newPreflightNodeCmd is a host's side of the pre-flight check of
// `gotrain run --hosts`, started over ssh by the launcher: it reads the
// launcher's requests on stdin and answers on stdout (see
// preflight.Node). Hidden: nobody types it.
func newPreflightNodeCmd() *cobra.Command {
	return &cobra.Command{
		Use:    preflight.NodeCommand,
		Short:  "Check this host for a multi-node job (started by gotrain run --hosts)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return preflight.Node(cmd.Context(), os.Stdin, os.Stdout)
		},
	}
}
