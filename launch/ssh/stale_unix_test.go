//go:build unix

package ssh

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestRemoveStale removes only the old socket directories of launchers
// that are gone.
func TestRemoveStale(t *testing.T) {
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Skipf("cannot run true: %v", err)
	}
	base := t.TempDir()
	old := time.Now().Add(-time.Minute)
	mk := func(name string, mtime time.Time) string {
		dir := filepath.Join(base, name)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(dir, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	gone := mk(fmt.Sprintf("gotrain-ssh-%d-1", dead.Process.Pid), old)
	recent := mk(fmt.Sprintf("gotrain-ssh-%d-2", dead.Process.Pid), time.Now())
	self := mk(fmt.Sprintf("gotrain-ssh-%d-3", os.Getpid()), old)
	alive := mk(fmt.Sprintf("gotrain-ssh-%d-4", os.Getppid()), old)
	unnamed := mk("gotrain-ssh-123456789", old) // an older launcher's: no pid
	removeStale(base)
	if _, err := os.Stat(gone); !os.IsNotExist(err) {
		t.Errorf("the directory of a launcher that is gone is still there (%v)", err)
	}
	for _, dir := range []string{recent, self, alive, unnamed} {
		if _, err := os.Stat(dir); err != nil {
			t.Errorf("%s was removed: %v", filepath.Base(dir), err)
		}
	}
}
