package kernels

import (
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
)

// EnvNumThreads is the environment variable that sets the number of
// goroutines a kernel may use (the launcher sets it per worker so that
// workers on one machine do not oversubscribe its cores).
const EnvNumThreads = "GOTRAIN_NUM_THREADS"

var numThreads atomic.Int64

// envWarning holds the attributes of the warning about an invalid
// EnvNumThreads, logged at the first NumThreads call rather than at init:
// a program installs its slog handler in main, after package init.
var (
	envWarning     []any
	envWarningOnce sync.Once
)

func init() {
	n, warning := threadsFromEnv()
	numThreads.Store(int64(n))
	envWarning = warning
}

// threadsFromEnv reads EnvNumThreads, falling back to GOMAXPROCS when it is
// unset or invalid; for an invalid value it also returns the attributes of
// the warning to log (not fatal: kernels run correctly with any thread
// count).
func threadsFromEnv() (int, []any) {
	def := runtime.GOMAXPROCS(0)
	s, ok := os.LookupEnv(EnvNumThreads)
	if !ok || s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return def, []any{"env", EnvNumThreads, "value", s, "using", def}
	}
	return n, nil
}

// NumThreads returns the number of goroutines one kernel call may use.
func NumThreads() int {
	if envWarning != nil { // set at init only
		envWarningOnce.Do(func() { slog.Warn("kernels: ignoring invalid thread count", envWarning...) })
	}
	return int(numThreads.Load())
}

// SetNumThreads sets the number of goroutines one kernel call may use;
// n < 1 means 1. It returns the previous value. Safe for concurrent use.
func SetNumThreads(n int) int {
	if n < 1 {
		n = 1
	}
	return int(numThreads.Swap(int64(n)))
}
