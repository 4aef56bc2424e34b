//go:build unix

package ssh

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// removeStale removes from base the socket directories of launchers that
// are gone (killed before they could remove their own): this user's
// gotrain-ssh-<pid>-* directories whose process no longer exists, older
// than their connections' ControlPersist.
func removeStale(base string) {
	dirs, _ := filepath.Glob(filepath.Join(base, "gotrain-ssh-*-*"))
	for _, dir := range dirs {
		rest := strings.TrimPrefix(filepath.Base(dir), "gotrain-ssh-")
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		fi, err := os.Lstat(dir)
		if err != nil || !fi.IsDir() || time.Since(fi.ModTime()) < 2*ControlPersist {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Getuid() {
			continue // another user's
		}
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			continue // alive, or not ours to ask: keep it
		}
		_ = os.RemoveAll(dir)
	}
}
