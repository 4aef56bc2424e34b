package tempdir

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// deadPID is the PID of a process the test started and waited for.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// makeOwned makes a directory in base named as Make names them, owned
// by pid in PID namespace ns.
func makeOwned(t *testing.T, base, kind string, pid int, ns uint64) string {
	t.Helper()
	dir := filepath.Join(base, fmt.Sprintf("gotrain-%s-%d.%d-123", kind, pid, ns))
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestSweep(t *testing.T) {
	base := t.TempDir()
	dead := deadPID(t)
	// The test's parent (go test) is alive while the test runs.
	alive := os.Getppid()
	gone := makeOwned(t, base, "agent", dead, pidNS())
	live := makeOwned(t, base, "agent", alive, pidNS())
	mine := makeOwned(t, base, "train", os.Getpid(), pidNS())
	otherNS := makeOwned(t, base, "run", dead, pidNS()+1)
	notMake := filepath.Join(base, fmt.Sprintf("gotrain-ssh-%d-123", dead))
	other := filepath.Join(base, "other-1.1-1")
	for _, d := range []string{notMake, other} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}

	if n := Sweep(base); n != 1 {
		t.Errorf("Sweep removed %d directories, want 1", n)
	}
	if _, err := os.Stat(gone); !os.IsNotExist(err) {
		t.Errorf("%s of a gone process is still there", gone)
	}
	for _, keep := range []string{live, mine, otherNS, notMake, other} {
		if _, err := os.Stat(keep); err != nil {
			t.Errorf("%s removed: %v", keep, err)
		}
	}
}

func TestMake(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	stale := makeOwned(t, os.TempDir(), "agent", deadPID(t), pidNS())
	dir, err := Make("agent")
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(dir) != os.TempDir() || !name.MatchString(filepath.Base(dir)) {
		t.Errorf("Make made %s outside %s", dir, os.TempDir())
	}
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("Make's directory: %v, %v", fi, err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("Make left the stale %s", stale)
	}
	if n := Sweep(os.TempDir()); n != 0 {
		t.Errorf("Sweep removed this process's directory")
	}
}
