package main

import (
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"time"
)

// panicError is a panic recovered at the top of the command: the value
// and the report file holding its stack.
type panicError struct {
	value  any
	report string // "" if the file could not be written
}

func (e *panicError) Error() string {
	v := strings.ReplaceAll(fmt.Sprint(e.value), "\n", " ")
	if e.report == "" {
		return "internal error: " + v + " (the stack could not be written to a file)"
	}
	return "internal error: " + v + " (stack in " + e.report + ")"
}

// guard runs f and turns a panic in it into a *panicError: the person
// running gotrain sees one line and the path of a file with the full
// report, not a screen of goroutine frames. (A panic on another goroutine,
// or the runtime's own fatal errors, end the process before this; the
// launcher shortens those from the outside, see launch's crash filter.)
func guard(f func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &panicError{value: v, report: writePanicReport(v, debug.Stack())}
		}
	}()
	return f()
}

// writePanicReport writes the panic's value, the command line and the
// stack to a new file in the temporary directory, and returns its path
// ("" if it could not).
func writePanicReport(v any, stack []byte) string {
	f, err := os.CreateTemp("", fmt.Sprintf("gotrain-panic-%d-*.txt", os.Getpid()))
	if err != nil {
		return ""
	}
	defer f.Close()
	_, err = fmt.Fprintf(f, "panic: %v\n\ncommand: %s\ntime: %s\n\n%s", v, strings.Join(os.Args, " "), time.Now().Format(time.RFC3339), stack)
	if err != nil {
		return ""
	}
	return f.Name()
}
