package fanout

import (
	"os/exec"
	"syscall"
)

// setProcAttr puts ssh in a process group of its own, so a Ctrl-C at the
// terminal reaches the launcher only (which stops the nodes in order), and
// has the kernel end it if the launcher dies, which closes the agent's
// connection and so stops its workers.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
