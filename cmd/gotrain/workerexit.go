package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/gotrain/gotrain/harness"
	"github.com/gotrain/gotrain/launch"
)

// signalContext is cancelled by SIGINT or SIGTERM, with a
// launch.SignalError cause naming the signal.
func signalContext() (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case s := <-sigs:
			cancel(&launch.SignalError{Signal: s.(syscall.Signal)})
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		cancel(nil)
	}
}

// failureExit prints err, the end of a run, and returns the status to
// exit with. A signal that stopped the run is named first and the status
// is 128+signal, as a shell reports it; a failure that is only the fallout
// of another rank's exits with event.ExitPeer, after a last line naming
// that rank (harness.ExitCode), for the launcher to find the root cause.
func failureExit(ctx context.Context, stderr io.Writer, err error) int {
	msg := strings.ReplaceAll(err.Error(), "\n", " ")
	var se *launch.SignalError
	if errors.As(context.Cause(ctx), &se) {
		fmt.Fprintf(stderr, "gotrain: terminated by %s: %s\n", launch.SignalName(se.Signal), msg)
		return 128 + int(se.Signal)
	}
	fmt.Fprintln(stderr, "gotrain:", msg)
	return harness.ExitCode(stderr, err)
}
