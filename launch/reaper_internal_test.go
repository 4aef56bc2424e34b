package launch

import (
	"bufio"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testproc"
)

// startGroup starts `sh -c 'sleep 30 & wait'` in a process group of its
// own, so the group holds a child as a worker's would.
func startGroup(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sh", "-c", "trap '' TERM; sleep 30 & echo ready; wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Once "ready" is out the trap is set and the child started.
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("group's first line %q, %v", line, err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	return cmd
}

// At EOF the reaper stops the groups still listed (SIGKILL after the grace
// period for those that ignore SIGTERM) and leaves the forgotten ones.
func TestReaperStopsListedGroups(t *testing.T) {
	listed, forgotten := startGroup(t), startGroup(t)
	lp, fp := listed.Process.Pid, forgotten.Process.Pid
	in := "+" + itoa(lp) + "\n+" + itoa(fp) + "\n-" + itoa(fp) + "\nbogus\n+1\n"
	start := time.Now()
	runReaper(strings.NewReader(in), 200*time.Millisecond)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("runReaper took %v", d)
	}
	exited := make(chan error, 1)
	go func() { exited <- listed.Wait() }()
	select {
	case err := <-exited:
		if ws, ok := listed.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("listed group's leader ended with %v; want SIGKILL (it ignores SIGTERM)", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("listed group still running 5 s after the reaper")
	}
	// The child is SIGKILLed with its leader; init reaps it.
	if !testproc.Poll(5*time.Second, func() bool { return !pgroupAlive(lp) }) {
		t.Fatal("the listed group's child survived the reaper")
	}
	if !pgroupAlive(fp) {
		t.Fatal("the reaper stopped a group it was told is gone")
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
