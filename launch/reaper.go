package launch

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// reaperEnv, set in the environment of a copy of the launcher's own
// executable, makes that copy run as the job's reaper instead of its main
// (see init). Its value is the grace period, in Go duration syntax, between
// SIGTERM and SIGKILL.
const reaperEnv = "GOTRAIN_LAUNCH_REAPER"

// A launcher killed by SIGKILL cannot stop its workers' process groups:
// the kernel kills the workers themselves (Pdeathsig, on Linux) but their
// children live on, orphaned. So Run starts a reaper, a copy of its own
// executable in a process group of its own, and tells it over a pipe which
// process groups are running. The kernel closes the pipe whenever the
// launcher dies; a reaper that reads EOF with groups still listed stops
// them (SIGTERM, then SIGKILL after the grace period) and exits.
func init() {
	if grace, ok := os.LookupEnv(reaperEnv); ok {
		d, err := time.ParseDuration(grace)
		if err != nil {
			fmt.Fprintf(os.Stderr, "launch: reaper: %s=%q: %v\n", reaperEnv, grace, err)
			os.Exit(2)
		}
		runReaper(os.Stdin, d)
		os.Exit(0)
	}
}

// runReaper reads "+pgid" (a group started) and "-pgid" (a group gone)
// lines from r until EOF, then stops every group still listed.
func runReaper(r io.Reader, grace time.Duration) {
	groups := map[int]bool{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if len(line) < 2 {
			continue
		}
		pgid, err := strconv.Atoi(line[1:])
		if err != nil || pgid <= 1 {
			continue
		}
		switch line[0] {
		case '+':
			groups[pgid] = true
		case '-':
			delete(groups, pgid)
		}
	}
	stopGroups(groups, grace)
}

// stopGroups sends SIGTERM to each process group, waits up to grace for
// them to empty, and SIGKILLs what is left.
func stopGroups(groups map[int]bool, grace time.Duration) {
	if len(groups) == 0 {
		return
	}
	for pgid := range groups {
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
	}
	for deadline := time.Now().Add(grace); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for pgid := range groups {
			if !pgroupAlive(pgid) {
				delete(groups, pgid)
			}
		}
		if len(groups) == 0 {
			return
		}
	}
	for pgid := range groups {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
}

// pgroupAlive reports whether process group pgid has a process that is not
// a zombie.
func pgroupAlive(pgid int) bool {
	err := syscall.Kill(-pgid, 0)
	if err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	if live, ok := groupHasLiveProcess(pgid); ok {
		return live
	}
	return true
}

// reaper is the launcher's end of the reaper process. A nil *reaper (none
// could be started) does nothing.
type reaper struct {
	cmd *exec.Cmd
	mu  sync.Mutex // serializes writes to w
	w   *os.File
}

// startReaper starts the reaper process for a job whose workers get grace
// between SIGTERM and SIGKILL.
func startReaper(grace time.Duration) (*reaper, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("launch: reaper: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("launch: reaper pipe: %w", err)
	}
	defer r.Close()
	cmd := exec.Command(exe)
	cmd.Args = []string{"gotrain-reaper"}
	env := []string{reaperEnv + "=" + grace.String()}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, reaperEnv+"=") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	cmd.Stdin = r
	// Its own group: a signal to the launcher's group (the terminal's ^C,
	// a test's group kill) must not take the reaper with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, fmt.Errorf("launch: start reaper: %w", err)
	}
	return &reaper{cmd: cmd, w: w}, nil
}

// watch tells the reaper that process group pgid is running.
func (r *reaper) watch(pgid int) { r.send('+', pgid) }

// forget tells the reaper that process group pgid is gone.
func (r *reaper) forget(pgid int) { r.send('-', pgid) }

func (r *reaper) send(op byte, pgid int) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	// A write error means the reaper is gone: nothing more to tell it.
	_, _ = r.w.Write(append(strconv.AppendInt([]byte{op}, int64(pgid), 10), '\n'))
}

// close ends the reaper: groups the launcher stopped have been forgotten,
// so it stops only those the launcher could not.
func (r *reaper) close() {
	if r == nil {
		return
	}
	r.w.Close()
	_ = r.cmd.Wait()
}
