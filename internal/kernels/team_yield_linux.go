package kernels

import "syscall"

// osYield lets other processes' threads waiting for this CPU run first
// (sched_yield), so that a polling team member gives way on a busy
// machine; with nothing else to run it returns at once.
func osYield() { syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
