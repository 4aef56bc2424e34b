package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testenv"
	"github.com/gotrain/gotrain/internal/testlog"
	"github.com/gotrain/gotrain/internal/testproc"
)

// The test binary runs as the gotrain command when it is testproc worker
// "gotrain", so the end-to-end tests run real gotrain processes without
// building a binary. The workers that such a process launches inherit its
// environment, and so run as gotrain too.
func TestMain(m *testing.M) {
	testproc.Dispatch(testproc.Workers{"gotrain": func() int {
		main() // exits non-zero on failure
		return 0
	}})
	os.Exit(runTests(m))
}

// runTests runs the tests in an environment of their own: the variables
// that configure gotrain, or place a process in a job (torchrun's, an
// engine's), are not taken from whoever runs the tests, and HOME is an
// empty directory, removed at the end. A test sets what it needs itself
// (t.Setenv), and the processes it starts inherit it.
func runTests(m *testing.M) int {
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if jobVariable(k) {
			os.Unsetenv(k)
		}
	}
	// The go command, which some tests run to build a program as a user
	// does, keeps its caches and settings under HOME by default: they stay
	// where they are.
	for _, d := range []struct {
		env  string
		base func() (string, error)
		sub  string
	}{{"GOCACHE", os.UserCacheDir, "go-build"}, {"GOENV", os.UserConfigDir, "go/env"}, {"GOPATH", os.UserHomeDir, "go"}} {
		if dir, err := d.base(); err == nil && os.Getenv(d.env) == "" {
			os.Setenv(d.env, filepath.Join(dir, d.sub))
		}
	}
	home, err := os.MkdirTemp("", "gotrain-test-home")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(home)
	os.Setenv("HOME", home)
	return m.Run()
}

// jobVariable reports whether k configures gotrain or a job's place,
// other than the tests' own switches.
func jobVariable(k string) bool {
	switch k {
	case testenv.RequireVar, "GOTRAIN_DASHBOARD_SCREENSHOT":
		return false
	case "MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
		"GROUP_WORLD_SIZE", "ROLE_NAME", "ROLE_RANK", "ROLE_WORLD_SIZE", "GLOO_SOCKET_IFNAME", "OMP_NUM_THREADS":
		return true
	}
	for _, p := range []string{"GOTRAIN_", "PET_", "TORCHELASTIC_", "SLURM_", "OMPI_", "PMI_", "PMIX_", "MPI_", "MPIR_CVAR_"} {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

// childPATH is the PATH of the processes the tests start: the system's
// programs (sh, sleep, ssh), and no directory where a gotrain might be
// installed, as every gotrain the tests run is this test binary.
const childPATH = "/usr/sbin:/usr/bin:/sbin:/bin"

// gotrainCmd returns the test binary set up to run as `gotrain args...`,
// with PATH childPATH.
func gotrainCmd(ctx context.Context, t testing.TB, args ...string) *exec.Cmd {
	t.Helper()
	cmd := testproc.Command(ctx, t, "gotrain", args...)
	cmd.Env = append(cmd.Env, "PATH="+childPATH)
	cmd.Dir = t.TempDir()
	// On timeout, SIGTERM lets the launcher stop its workers (each in its
	// own process group) before WaitDelay's SIGKILL.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// runGotrain runs `gotrain args...` to completion within limit and returns
// its combined output, its stdout, and its exit code.
func runGotrain(t *testing.T, limit time.Duration, args ...string) (combined, stdout string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := gotrainCmd(ctx, t, args...)
	var all, out testlog.Buffer
	cmd.Stdout = io.MultiWriter(&all, &out)
	cmd.Stderr = &all
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("gotrain %s: still running after %v; output:\n%s", strings.Join(args, " "), limit, all.String())
	}
	code = cmd.ProcessState.ExitCode()
	if err != nil && code <= 0 {
		t.Fatalf("gotrain %s: %v; output:\n%s", strings.Join(args, " "), err, all.String())
	}
	return all.String(), out.String(), code
}

// summary parses the key=value fields of the last non-empty line of out,
// after the launcher's "[rank0]: " prefix if it has one.
func summary(t testing.TB, out string) map[string]string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := strings.TrimPrefix(lines[len(lines)-1], "[rank0]: ")
	kv := map[string]string{}
	for _, f := range strings.Fields(last) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			t.Fatalf("last line %q: field %q is not key=value", last, f)
		}
		kv[k] = v
	}
	return kv
}

// num returns the summary field key as a number.
func num(t testing.TB, kv map[string]string, key string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(kv[key], 64)
	if err != nil {
		t.Fatalf("summary %v: %s: %v", kv, key, err)
	}
	return v
}

// workerPID returns the pid of the child of parent whose environment has
// RANK=rank, waiting up to limit for it to appear. No event announces a
// new child of another process, so the process table is polled.
func workerPID(t *testing.T, parent, rank int, limit time.Duration) int {
	t.Helper()
	want := []byte("RANK=" + strconv.Itoa(rank))
	found := 0
	poll(limit, 10*time.Millisecond, func() bool {
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || parentPID(pid) != parent {
				continue
			}
			env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
			if err != nil {
				continue
			}
			for _, kv := range bytes.Split(env, []byte{0}) {
				if bytes.Equal(kv, want) {
					found = pid
					return true
				}
			}
		}
		return false
	})
	if found == 0 {
		t.Fatalf("no worker with RANK=%d under pid %d after %v", rank, parent, limit)
	}
	return found
}

// parentPID reads the parent pid from /proc/pid/stat, or returns -1.
func parentPID(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// The command name in parentheses may hold spaces: fields start after
	// the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return -1
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return -1
	}
	return ppid
}

// linesWith returns the lines of out that contain every one of words.
func linesWith(out string, words ...string) []string {
	var found []string
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
next:
	for sc.Scan() {
		for _, w := range words {
			if !strings.Contains(sc.Text(), w) {
				continue next
			}
		}
		found = append(found, sc.Text())
	}
	return found
}
