package launch

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// stopSignalOf is the signal that has stopped child pid (SIGSTOP,
// SIGTSTP, ...), or 0 if it runs or has exited. It peeks (WNOWAIT): the
// wait goroutine still reaps the child.
func stopSignalOf(pid int) syscall.Signal {
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, pid, &info, unix.WSTOPPED|unix.WNOHANG|unix.WNOWAIT, nil); err != nil {
		return 0
	}
	// For a stopped child, si_pid is set and si_status holds the signal.
	if siPID(&info) != pid || siCode(&info) != cldStopped {
		return 0
	}
	return syscall.Signal(siStatus(&info))
}

// The SIGCHLD fields of siginfo_t, which unix.Siginfo keeps unexported:
// si_pid, si_uid and si_status follow signo, errno and code, at the
// union's pointer-aligned offset.
const siUnion = (12 + unsafe.Sizeof(uintptr(0)) - 1) &^ (unsafe.Sizeof(uintptr(0)) - 1)

func siField(info *unix.Siginfo, off uintptr) int32 {
	return *(*int32)(unsafe.Add(unsafe.Pointer(info), siUnion+off))
}

func siPID(info *unix.Siginfo) int    { return int(siField(info, 0)) }
func siCode(info *unix.Siginfo) int   { return int(info.Code) }
func siStatus(info *unix.Siginfo) int { return int(siField(info, 8)) }

// cldStopped is CLD_STOPPED, the si_code of a child stopped by a signal.
const cldStopped = 5
