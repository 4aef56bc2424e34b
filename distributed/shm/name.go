package shm

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Every file gotrain makes in /dev/shm is named
//
//	gotrain-<job>-<pid>.<pidns>-<kind>-<random>
//
// job is the launcher's run id (GOTRAIN_RUN_ID, "none" without one) with
// every byte but letters, digits, '_' and '.' replaced by '_'; pid is the
// creating process and pidns its PID namespace (the inode of
// /proc/self/ns/pid, 0 if unknown), since a /dev/shm shared between
// containers may hold files of processes whose pids mean nothing here;
// kind says what the file is (arena, ring). The creator unlinks a file as
// soon as every peer has mapped it; a process killed in between (by the
// OOM killer, say) leaves it, and the name tells who may remove it:
// RemoveStale removes this user's files whose creator is gone.
const (
	shmDir     = "/dev/shm"
	namePrefix = "gotrain-"
	// EnvRunID is the launcher's run id, which names the job's files.
	EnvRunID = "GOTRAIN_RUN_ID"
	// maxJobLen bounds the job part of a name (a UUID's length).
	maxJobLen = 36
)

// jobTag is runID as it appears in a file name.
func jobTag(runID string) string {
	if runID == "" {
		runID = "none"
	}
	if len(runID) > maxJobLen {
		runID = runID[:maxJobLen]
	}
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' {
			return r
		}
		return '_'
	}, runID)
}

// namePattern is the os.CreateTemp pattern of a new file of kind for this
// process, in the job that GOTRAIN_RUN_ID names.
func namePattern(kind string) string {
	if kind == "" || strings.ContainsAny(kind, "-/*") {
		panic("shm: file kind " + strconv.Quote(kind) + " must be a non-empty word")
	}
	return namePrefix + jobTag(os.Getenv(EnvRunID)) + "-" + strconv.Itoa(os.Getpid()) + "." +
		strconv.FormatUint(pidNS(), 10) + "-" + kind + "-*"
}

// owner is what a file's name says about it.
type owner struct {
	job string // the job tag
	pid int
	ns  uint64
}

// parseName reads a file name made from namePattern; ok is false for any
// other name, which RemoveStale never touches.
func parseName(name string) (o owner, ok bool) {
	rest, ok := strings.CutPrefix(name, namePrefix)
	if !ok {
		return owner{}, false
	}
	f := strings.Split(rest, "-")
	if len(f) != 4 || f[0] == "" || f[2] == "" || f[3] == "" {
		return owner{}, false
	}
	p, n, ok := strings.Cut(f[1], ".")
	if !ok {
		return owner{}, false
	}
	pid, err1 := strconv.Atoi(p)
	ns, err2 := strconv.ParseUint(n, 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 {
		return owner{}, false
	}
	return owner{job: f[0], pid: pid, ns: ns}, true
}

// FilePattern is the filepath.Glob pattern of the /dev/shm files of the job
// that runID names, for tests that check none is left.
func FilePattern(runID string) string {
	return filepath.Join(shmDir, namePrefix+jobTag(runID)+"-*")
}
