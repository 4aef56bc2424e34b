package kernels

import (
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
)

// EnvNumThreads is the environment variable that sets the number of
// goroutines a kernel may use (the launcher sets it per worker so that
// workers on one machine do not oversubscribe its cores).
const EnvNumThreads = "GOTRAIN_NUM_THREADS"

var numThreads atomic.Int64

func init() { numThreads.Store(int64(threadsFromEnv())) }

// threadsFromEnv reads EnvNumThreads, falling back to GOMAXPROCS when it is
// unset or invalid (an invalid value is logged, not fatal: kernels still
// run correctly with any thread count).
func threadsFromEnv() int {
	def := runtime.GOMAXPROCS(0)
	s, ok := os.LookupEnv(EnvNumThreads)
	if !ok || s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		slog.Warn("kernels: ignoring invalid thread count", "env", EnvNumThreads, "value", s, "using", def)
		return def
	}
	return n
}

// NumThreads returns the number of goroutines one kernel call may use.
func NumThreads() int { return int(numThreads.Load()) }

// SetNumThreads sets the number of goroutines one kernel call may use;
// n < 1 means 1. It returns the previous value. Safe for concurrent use.
func SetNumThreads(n int) int {
	if n < 1 {
		n = 1
	}
	return int(numThreads.Swap(int64(n)))
}
