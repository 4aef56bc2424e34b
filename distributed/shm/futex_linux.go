package shm

import (
	"syscall"
	"time"
	"unsafe"
)

// Futex operations on a word in memory shared between processes (hence
// not FUTEX_PRIVATE_FLAG).
const (
	futexWait = 0
	futexWake = 1
)

// futexSleep blocks while the 32-bit word at addr holds val, at most d.
// Spurious returns are fine: callers re-check their condition.
func futexSleep(addr *uint64, val uint32, d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWait, uintptr(val),
		uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWakeAll wakes every process sleeping on the word at addr.
func futexWakeAll(addr *uint64) {
	syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWake, 1<<30, 0, 0, 0)
}
