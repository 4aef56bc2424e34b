//go:build unix && !linux

package launch

import "syscall"

// workerSysProcAttr puts each worker in its own process group, so that
// signalling the group reaches the worker's children too. (Only Linux can
// also kill workers whose launcher died.)
func workerSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// groupHasLiveProcess cannot tell zombies from live processes here; the
// caller relies on signal 0 alone.
func groupHasLiveProcess(pgid int) (alive, ok bool) { return false, false }
