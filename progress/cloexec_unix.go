//go:build unix

package progress

import "syscall"

// closeOnExec keeps the pipe from the program's own child processes.
func closeOnExec(fd int) { syscall.CloseOnExec(fd) }

// isPipe reports whether fd is an open pipe, checked before an *os.File
// (whose finalizer would close it) is made of it.
func isPipe(fd int) bool {
	var st syscall.Stat_t
	return syscall.Fstat(fd, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFIFO
}
