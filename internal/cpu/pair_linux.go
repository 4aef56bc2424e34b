package cpu

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// Allowed returns the CPUs this process may run on (its affinity mask), in
// increasing order.
func Allowed() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("reading this process's CPU affinity: %w", err)
	}
	var cpus []int
	for c := 0; c < len(set)*64 && len(cpus) < set.Count(); c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// onCPU runs f on a thread of its own pinned to cpu; the thread is
// discarded afterwards (its goroutine exits locked), so that its affinity
// never reaches other goroutines.
func onCPU(cpu int, f func() error) error {
	runtime.LockOSThread()
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pinning a thread to cpu %d: %w", cpu, err)
	}
	return f()
}
