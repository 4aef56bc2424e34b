// Package tempdir makes gotrain's private temporary directories so that
// none outlives its process for long. A process removes its own on every
// exit it can handle (errors, signals); one killed before it could (by
// SIGKILL, or the OOM killer) leaves its directory behind, which the next
// Make of any gotrain process removes: each directory's name records its
// owner's PID and PID namespace, and only one whose owner is gone is
// removed. (In the name, not in a file inside: the directory's contents
// are its user's.)
package tempdir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
)

// name matches the name of a directory Make created: kind, PID, PID
// namespace (the inode number of /proc/self/ns/pid, 0 where there is
// none) and MkdirTemp's random part.
var name = regexp.MustCompile(`^gotrain-([a-z]+)-([0-9]+)\.([0-9]+)-[0-9]+$`)

// Make creates a new directory in os.TempDir(), readable by this user
// only, named gotrain-<kind>-<pid>.<pid namespace>-<random>, after
// removing the stale ones (Sweep). kind is lower-case letters. The caller
// removes it (os.RemoveAll) when done.
func Make(kind string) (string, error) {
	Sweep(os.TempDir())
	return os.MkdirTemp("", fmt.Sprintf("gotrain-%s-%d.%d-", kind, os.Getpid(), pidNS()))
}

// Sweep removes from base the directories Make created whose owner
// process is gone, and returns how many it removed. A directory of
// another user, of another PID namespace, or of a live process (or of a
// process that reuses the owner's PID) is kept.
func Sweep(base string) int {
	dirs, _ := filepath.Glob(filepath.Join(base, "gotrain-*"))
	ns, removed := strconv.FormatUint(pidNS(), 10), 0
	for _, dir := range dirs {
		fi, err := os.Lstat(dir)
		if err != nil || !fi.IsDir() {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Getuid() {
			continue // another user's
		}
		m := name.FindStringSubmatch(filepath.Base(dir))
		if m == nil || m[3] != ns {
			continue // not Make's, or of another PID namespace
		}
		pid, err := strconv.Atoi(m[2])
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			continue // alive, or not ours to ask
		}
		if os.RemoveAll(dir) == nil {
			removed++
		}
	}
	return removed
}

// pidNS is the inode number of this process's PID namespace, or 0 where
// there is none to read.
func pidNS() uint64 {
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/pid", &st); err != nil {
		return 0
	}
	return st.Ino
}
