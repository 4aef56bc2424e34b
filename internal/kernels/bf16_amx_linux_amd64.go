//go:build !noasm

package kernels

import "syscall"

// Linux hands out the AMX tile-data state (8 KiB of XSAVE area per
// thread) only to processes that ask for it; a tile instruction without
// the permission faults.
const (
	sysArchPrctl      = 158    // SYS_arch_prctl
	archReqXcompPerm  = 0x1023 // ARCH_REQ_XCOMP_PERM
	xfeatureXtiledata = 18     // XFEATURE_XTILEDATA
)

// requestAMXPermission asks the kernel for this process's permission to
// use the AMX tile registers; it covers every thread, present and future.
// The kernel refuses it when a thread's signal stack could not hold the
// larger signal frame; Go's (32 KiB) can.
func requestAMXPermission() bool {
	_, _, errno := syscall.RawSyscall(sysArchPrctl, archReqXcompPerm, xfeatureXtiledata, 0)
	return errno == 0
}
