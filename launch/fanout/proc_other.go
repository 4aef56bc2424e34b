//go:build !linux

package fanout

import (
	"os/exec"
	"syscall"
)

// setProcAttr puts ssh in a process group of its own, so a Ctrl-C at the
// terminal reaches the launcher only, which stops the nodes in order.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}
