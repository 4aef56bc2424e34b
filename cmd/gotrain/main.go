// Command gotrain trains neural networks with distributed data parallelism:
// `gotrain train mnist` runs the built-in demo job, `gotrain run` launches
// any program's workers like torchrun, and `gotrain bench` measures kernels
// and collectives.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// rootCmd is the top of the CLI; each subcommand lives in its own file and
// adds itself in init.
var rootCmd = &cobra.Command{
	Use:           "gotrain",
	Short:         "Distributed data-parallel training in Go",
	SilenceUsage:  true,
	SilenceErrors: true,
}

// benchCmd groups the benchmarks (`gotrain bench gemm|allreduce|...`).
var benchCmd = &cobra.Command{
	Use:   "bench",
	Short: "Measure kernels and collectives",
}

func init() { rootCmd.AddCommand(benchCmd) }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := rootCmd.ExecuteContext(ctx)
	stop()
	if err != nil {
		var ec exitCodeError
		if asExitCode(err, &ec) {
			os.Exit(int(ec))
		}
		fmt.Fprintln(os.Stderr, "gotrain:", err)
		os.Exit(1)
	}
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
