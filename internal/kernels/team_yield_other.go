//go:build !linux

package kernels

// osYield is a no-op where sched_yield is not at hand: runtime.Gosched
// still lets this process's other goroutines run.
func osYield() {}
