// Command gotrain trains neural networks with distributed data parallelism:
// `gotrain train mnist` runs the built-in demo job, `gotrain run` launches
// any program's workers like torchrun, and `gotrain bench` measures kernels
// and collectives.
package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/gotrain/gotrain/internal/logging"
	"github.com/gotrain/gotrain/launch"
)

// newRootCmd builds the CLI's command tree, one constructor per command.
// Each call builds a fresh tree with its own flag values.
func newRootCmd() *cobra.Command {
	var version bool
	root := &cobra.Command{
		Use:           "gotrain",
		Short:         "Distributed data-parallel training in Go",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if version {
				return writeVersion(cmd.OutOrStdout())
			}
			return unknownSubcommand(cmd, args)
		},
	}
	root.Flags().BoolVar(&version, "version", false, "print the version, as gotrain version does")
	root.SetFlagErrorFunc(flagErrorFunc)
	root.AddCommand(
		newRunCmd(),
		newBenchCmd(),
		newEnvCmd(),
		newStoreCmd(),
		newTraceCmd(),
		newPlotCmd(),
		newAgentCmd(),
		newPreflightNodeCmd(),
		newVersionCmd(),
		newTLSCmd(),
		newTokenizerCmd(),
	)
	root.AddCommand(newTrainCmd())
	root.AddCommand(newCheckpointCmd())
	root.AddCommand(newDataCmd())
	root.AddCommand(newGenerateCmd())
	return root
}

// newBenchCmd groups the benchmarks (`gotrain bench gemm|cores|allreduce|...`).
func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench BENCHMARK",
		Short: "Measure kernels and collectives",
		Args:  cobra.ArbitraryArgs,
		RunE:  unknownSubcommand,
	}
	cmd.AddCommand(newBenchGemmCmd(), newBenchTrainCmd(), newBenchCoresCmd())
	for _, op := range []string{"allreduce", "broadcast", "allgather"} {
		cmd.AddCommand(newBenchCollectiveCmd(op))
	}
	return cmd
}

// Exit statuses: a failed run, and a command line refused before anything
// started (as Go's flag package and most Unix commands use 2).
const (
	exitFailure = 1
	exitUsage   = 2
)

func main() {
	// A worker logs in its launcher's format with its rank; `run` and
	// `train mnist` reinstall it for --log-format.
	slog.SetDefault(logging.FromEnv(os.Stderr, ""))
	// A closed stdout (`gotrain ... | head -1`) makes writes fail with EPIPE
	// instead of killing the process (and, for `run`, the job with it).
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	ctx, stop := signalContext()
	// A panic on this goroutine is one line and a report file (guard.go).
	err := guard(func() error { return newRootCmd().ExecuteContext(ctx) })
	stop()
	if err != nil {
		var ec exitCodeError
		if asExitCode(err, &ec) {
			os.Exit(int(ec))
		}
		if isUsage(err) {
			fmt.Fprintln(os.Stderr, "gotrain:", strings.ReplaceAll(err.Error(), "\n", " "))
			refuseAsWorker(os.Stderr, err) // the other nodes' ranks wait for this one
			os.Exit(exitUsage)
		}
		os.Exit(failureExit(ctx, os.Stderr, err))
	}
}

// isUsage reports whether err is a refused command line: a usageError, or
// a configuration the launcher refused before starting any worker.
func isUsage(err error) bool {
	var ue usageError
	return errors.As(err, &ue) || errors.Is(err, launch.ErrConfig) || errors.Is(err, launch.ErrProgramNotFound)
}

// exitCodeError makes the process exit with the given code and no message
// (the launcher propagates a worker's exit code this way).
type exitCodeError int

func (e exitCodeError) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func asExitCode(err error, target *exitCodeError) bool {
	ec, ok := err.(exitCodeError)
	if ok {
		*target = ec
	}
	return ok
}
