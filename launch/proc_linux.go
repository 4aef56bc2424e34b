package launch

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// workerSysProcAttr puts each worker in its own process group, so that
// signalling the group reaches the worker's children too, and has the
// kernel SIGKILL the worker if the launcher dies without stopping it (no
// orphaned workers holding ports and memory).
func workerSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// groupHasLiveProcess reports whether process group pgid has a member that
// is not a zombie, reading /proc; ok is false if /proc cannot tell. Zombies
// matter in containers whose init does not reap orphans promptly: a killed
// worker's child lingers there as a zombie in the worker's group, and
// signal 0 to the group still succeeds.
func groupHasLiveProcess(pgid int) (alive, ok bool) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return false, false
	}
	for _, e := range entries {
		name := e.Name()
		if name[0] < '0' || name[0] > '9' {
			continue
		}
		stat, err := os.ReadFile("/proc/" + name + "/stat")
		if err != nil {
			continue // exited since ReadDir
		}
		// "pid (comm) state ppid pgrp ...": comm may hold any byte, so
		// parse from the last ')'.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 3 {
			continue
		}
		if pg, err := strconv.Atoi(f[2]); err == nil && pg == pgid && f[0] != "Z" && f[0] != "X" {
			return true, true
		}
	}
	return false, true
}
