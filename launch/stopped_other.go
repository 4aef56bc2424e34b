//go:build !linux

package launch

import "syscall"

// stopSignalOf reports 0: outside Linux a stopped worker is found only
// through the ranks that failed waiting for it.
func stopSignalOf(pid int) syscall.Signal { return 0 }
