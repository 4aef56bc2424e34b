package launch_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gotrain/gotrain/distributed/clusterenv"
	"github.com/gotrain/gotrain/internal/testproc"
	"github.com/gotrain/gotrain/launch"
)

// job is one launch.Run of the test binary as worker, with its output kept.
type job struct {
	cfg                 launch.Config
	stdout, stderr, log bytes.Buffer
}

// newJob configures a standalone job of nproc test workers doing action,
// with per-rank overrides, leaving their files in dir.
func newJob(t *testing.T, nproc int, action string, perRank map[int]string) *job {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env := withoutKeys(os.Environ(), append([]string{testproc.WorkerEnv, envAction, envDir, envPeers}, contractVars...)...)
	env = append(env, testproc.Env("worker"), envAction+"="+action, envDir+"="+t.TempDir())
	for r, a := range perRank {
		env = append(env, fmt.Sprintf("%s_%d=%s", envAction, r, a))
	}
	j := &job{cfg: launch.Config{
		Program:         exe,
		Env:             env,
		NProcPerNode:    nproc,
		Standalone:      true,
		MonitorInterval: 10 * time.Millisecond,
		StopTimeout:     2 * time.Second,
		RestartBackoff:  time.Millisecond,
	}}
	j.cfg.Stdout, j.cfg.Stderr = &j.stdout, &j.stderr
	// Only Run's goroutine logs, so the buffer needs no lock.
	j.cfg.Logger = slog.New(slog.NewTextHandler(&j.log, nil))
	return j
}

func (j *job) dir() string { v, _ := lookup(j.cfg.Env, envDir); return v }

func (j *job) setEnv(kv ...string) { j.cfg.Env = append(j.cfg.Env, kv...) }

// run runs the job, its output logged if the test fails.
func (j *job) run(t *testing.T, ctx context.Context) (int, error) {
	t.Helper()
	code, err := launch.Run(ctx, j.cfg)
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("LAUNCH_TEST_VERBOSE") != "" {
			t.Logf("stdout:\n%s\nstderr:\n%s\nlauncher log:\n%s", j.stdout.String(), j.stderr.String(), j.log.String())
		}
	})
	return code, err
}

// linesOf splits prefixed console output into each rank's lines, failing
// the test on a line without a rank prefix.
func linesOf(t *testing.T, out string) map[int][]string {
	t.Helper()
	re := regexp.MustCompile(`^\[rank(\d+)\]: (.*)$`)
	byRank := map[int][]string{}
	for line := range strings.Lines(out) {
		m := re.FindStringSubmatch(strings.TrimSuffix(line, "\n"))
		if m == nil {
			t.Fatalf("line without rank prefix: %.200q", line)
		}
		r, _ := strconv.Atoi(m[1])
		byRank[r] = append(byRank[r], m[2])
	}
	return byRank
}

func envOf(t *testing.T, lines []string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, l := range lines {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			t.Fatalf("not KEY=VALUE: %q", l)
		}
		env[k] = v
	}
	return env
}

func withoutKeys(env []string, keys ...string) []string {
	drop := map[string]bool{}
	for _, k := range keys {
		drop[k] = true
	}
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if !drop[k] && !strings.HasPrefix(k, envAction+"_") {
			out = append(out, kv)
		}
	}
	return out
}

func lookup(env []string, key string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

// pidsIn reads the pid files a job's workers left in dir.
func pidsIn(t *testing.T, dir string) []int {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "pid-*"))
	var pids []int
	for _, f := range files {
		if strings.HasSuffix(f, ".tmp") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(string(b))
		if err != nil {
			t.Fatalf("pid file %s: %v", f, err)
		}
		pids = append(pids, pid)
	}
	return pids
}

// assertGone fails if any of pids is still a live process. Zombies count
// as gone: Run reaps its workers, but orphaned children are reaped by init,
// which in some containers takes a while.
func assertGone(t *testing.T, pids []int) {
	t.Helper()
	for _, pid := range pids {
		if !testproc.Poll(5*time.Second, func() bool { return !isLive(pid) }) {
			t.Errorf("process %d still runs after Run returned", pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// isLive reports whether pid is a process and not a zombie.
func isLive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return !errors.Is(err, os.ErrNotExist) || runtime.GOOS != "linux"
	}
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || len(stat) < i+3 || stat[i+2] != 'Z'
}

// waitForFiles waits until n pid files exist in dir, or reports failure
// after 30 s. It may run on any goroutine.
func waitForFiles(t *testing.T, dir string, n int) {
	t.Helper()
	pidFiles := func() int {
		files, _ := filepath.Glob(filepath.Join(dir, "pid-*[0-9]"))
		return len(files)
	}
	if !testproc.Poll(30*time.Second, func() bool { return pidFiles() >= n }) {
		t.Errorf("workers did not start: %d of %d pid files", pidFiles(), n)
	}
}

// stopBound is how soon after a worker's failure (or the context's end)
// Run returns, at most, when the job's workers stop at SIGTERM: the bound
// is one StopTimeout and the last output's drain, several times over for a
// loaded machine. Workers that did not stop would keep Run for their
// minute of sleep.
func stopBound(j *job) time.Duration { return 4 * (j.cfg.StopTimeout + time.Second) }

// failedAt makes j record when the launcher sees its first worker fail.
func (j *job) failedAt() func() time.Time {
	var mu sync.Mutex
	var at time.Time
	j.cfg.OnWorkerFailure = func(launch.Failure) {
		mu.Lock()
		defer mu.Unlock()
		if at.IsZero() {
			at = time.Now()
		}
	}
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return at
	}
}

// TestEnvContractTwoNodes runs a 2 nodes × 2 workers job as two launchers
// (node ranks 0 and 1) and checks every worker's environment.
func TestEnvContractTwoNodes(t *testing.T) {
	var jobs [2]*job
	for node := range jobs {
		j := newJob(t, 2, "env", nil)
		j.cfg.Standalone = false
		j.cfg.NNodes, j.cfg.NodeRank = 2, node
		j.cfg.MasterAddr, j.cfg.MasterPort = "10.9.8.7", 29555
		j.cfg.RunID, j.cfg.MaxRestarts = "job7", 2
		// Inherited values: the token and OMP_NUM_THREADS are kept, RANK is
		// the launcher's to set.
		j.setEnv("GOTRAIN_TOKEN=shared-secret", "OMP_NUM_THREADS=5", "RANK=99")
		jobs[node] = j
	}
	var wg sync.WaitGroup
	codes, errs := [2]int{}, [2]error{}
	for node, j := range jobs {
		wg.Go(func() { codes[node], errs[node] = j.run(t, context.Background()) })
	}
	wg.Wait()
	threads := strconv.Itoa(max(1, clusterenv.CPUs()/2))
	for node, j := range jobs {
		if codes[node] != 0 || errs[node] != nil {
			t.Fatalf("node %d: Run = %d, %v", node, codes[node], errs[node])
		}
		byRank := linesOf(t, j.stdout.String())
		if len(byRank) != 2 {
			t.Fatalf("node %d: output from ranks %v, want 2 ranks", node, byRank)
		}
		for local := range 2 {
			rank := node*2 + local
			got := envOf(t, byRank[rank])
			want := map[string]string{
				"RANK": strconv.Itoa(rank), "LOCAL_RANK": strconv.Itoa(local),
				"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2",
				"GROUP_RANK": strconv.Itoa(node), "GROUP_WORLD_SIZE": "2",
				"ROLE_NAME": "default", "ROLE_RANK": strconv.Itoa(rank), "ROLE_WORLD_SIZE": "4",
				"MASTER_ADDR": "10.9.8.7", "MASTER_PORT": "29555",
				"TORCHELASTIC_RESTART_COUNT": "0", "GOTRAIN_RESTART_COUNT": "0",
				"TORCHELASTIC_MAX_RESTARTS": "2",
				"TORCHELASTIC_RUN_ID":       "job7", "GOTRAIN_RUN_ID": "job7",
				"TORCHELASTIC_USE_AGENT_STORE": "False",
				"GOTRAIN_TOKEN":                "shared-secret",
				"OMP_NUM_THREADS":              "5", "GOTRAIN_NUM_THREADS": threads,
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("rank %d: %s=%q, want %q", rank, k, got[k], v)
				}
			}
		}
	}
}

func TestStandaloneEnv(t *testing.T) {
	tokens := map[string]bool{}
	for range 2 {
		j := newJob(t, 2, "env", nil)
		code, err := j.run(t, context.Background())
		if code != 0 || err != nil {
			t.Fatalf("Run = %d, %v", code, err)
		}
		byRank := linesOf(t, j.stdout.String())
		e0, e1 := envOf(t, byRank[0]), envOf(t, byRank[1])
		if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(e0["GOTRAIN_TOKEN"]) {
			t.Errorf("token %q is not 32 random bytes in hex", e0["GOTRAIN_TOKEN"])
		}
		if e0["GOTRAIN_TOKEN"] != e1["GOTRAIN_TOKEN"] {
			t.Errorf("ranks got different tokens")
		}
		tokens[e0["GOTRAIN_TOKEN"]] = true
		if !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(e0["GOTRAIN_RUN_ID"]) {
			t.Errorf("standalone run id %q is not a random UUID", e0["GOTRAIN_RUN_ID"])
		}
		port, _ := strconv.Atoi(e0["MASTER_PORT"])
		if port <= 0 || port > 65535 || e0["MASTER_PORT"] != e1["MASTER_PORT"] {
			t.Errorf("MASTER_PORT %q, %q: want one free port", e0["MASTER_PORT"], e1["MASTER_PORT"])
		}
		threads := strconv.Itoa(max(1, clusterenv.CPUs()/2))
		if e0["OMP_NUM_THREADS"] != threads || e0["GOTRAIN_NUM_THREADS"] != threads {
			t.Errorf("threads OMP=%q GOTRAIN=%q, want %s", e0["OMP_NUM_THREADS"], e0["GOTRAIN_NUM_THREADS"], threads)
		}
		if e0["MASTER_ADDR"] != "127.0.0.1" || e0["WORLD_SIZE"] != "2" || e1["RANK"] != "1" {
			t.Errorf("MASTER_ADDR=%q WORLD_SIZE=%q RANK(1)=%q", e0["MASTER_ADDR"], e0["WORLD_SIZE"], e1["RANK"])
		}
	}
	if len(tokens) != 2 {
		t.Errorf("two jobs got the same token")
	}
}

func TestMultiNodeNeedsToken(t *testing.T) {
	j := newJob(t, 1, "env", nil)
	j.cfg.Standalone, j.cfg.NNodes, j.cfg.MasterAddr = false, 2, "10.9.8.7"
	code, err := j.run(t, context.Background())
	if !errors.Is(err, launch.ErrConfig) || !strings.Contains(err.Error(), "GOTRAIN_TOKEN") || code != 1 {
		t.Fatalf("Run = %d, %v; want a configuration error naming GOTRAIN_TOKEN", code, err)
	}
	if j.stdout.Len() != 0 {
		t.Errorf("workers ran: %q", j.stdout.String())
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*launch.Config)
		want string
	}{
		{"no program", func(c *launch.Config) { c.Program = "" }, "no program"},
		{"negative nproc", func(c *launch.Config) { c.NProcPerNode = -1 }, "nproc-per-node"},
		{"node rank too big", func(c *launch.Config) { c.Standalone, c.NNodes, c.NodeRank = false, 2, 2 }, "node-rank 2 out of range"},
		{"negative node rank", func(c *launch.Config) { c.NodeRank = -1 }, "node-rank -1"},
		{"port too big", func(c *launch.Config) { c.MasterPort = 70000 }, "master-port 70000"},
		{"negative port", func(c *launch.Config) { c.MasterPort = -5 }, "master-port -5"},
		{"standalone two nodes", func(c *launch.Config) { c.NNodes = 2 }, "standalone"},
		{"negative restarts", func(c *launch.Config) { c.MaxRestarts = -1 }, "max-restarts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := newJob(t, 1, "env", nil)
			tc.edit(&j.cfg)
			code, err := launch.Run(context.Background(), j.cfg)
			if !errors.Is(err, launch.ErrConfig) || !strings.Contains(err.Error(), tc.want) || code != 1 {
				t.Fatalf("Run = %d, %v; want ErrConfig mentioning %q", code, err, tc.want)
			}
		})
	}
}

func TestProgramNotFound(t *testing.T) {
	for _, prog := range []string{"gotrain-no-such-program", "./no/such/prog", "/"} {
		j := newJob(t, 1, "env", nil)
		j.cfg.Program = prog
		code, err := launch.Run(context.Background(), j.cfg)
		if !errors.Is(err, launch.ErrProgramNotFound) || !strings.Contains(err.Error(), prog) || code != 1 {
			t.Errorf("Run(%q) = %d, %v; want ErrProgramNotFound naming it", prog, code, err)
		}
	}
}

// TestOutputPrefixes has three workers write lines in pieces at the same
// time; every console line must be one whole line of one worker.
func TestOutputPrefixes(t *testing.T) {
	j := newJob(t, 3, "lines", nil)
	j.cfg.LogDir = t.TempDir()
	code, err := j.run(t, context.Background())
	if code != 0 || err != nil {
		t.Fatalf("Run = %d, %v", code, err)
	}
	lineRE := regexp.MustCompile(`^r=(\d+) i=(\d+) n=(\d+) ([a-z]+)$`)
	byRank := linesOf(t, j.stdout.String())
	for rank := range 3 {
		lines := byRank[rank]
		next := 0
		var long strings.Builder
		for _, l := range lines {
			if m := lineRE.FindStringSubmatch(l); m != nil {
				r, _ := strconv.Atoi(m[1])
				i, _ := strconv.Atoi(m[2])
				n, _ := strconv.Atoi(m[3])
				want := strings.Repeat(string(rune('a'+i%26)), 1+(i*37)%900)
				if r != rank || i != next || n != len(m[4]) || m[4] != want {
					t.Fatalf("rank %d: line %d is mangled: %.120q", rank, next, l)
				}
				next++
				continue
			}
			if strings.HasPrefix(l, "long ") || long.Len() > 0 && strings.Trim(l, "y") == "" {
				long.WriteString(l)
				continue
			}
			if l != "tail-"+strconv.Itoa(rank) {
				t.Fatalf("rank %d: unexpected line %.120q", rank, l)
			}
		}
		if next != linesPerWorker {
			t.Errorf("rank %d: %d whole lines, want %d", rank, next, linesPerWorker)
		}
		if want := "long r=" + strconv.Itoa(rank) + " " + strings.Repeat("y", longLineLen); long.String() != want {
			t.Errorf("rank %d: long line rebuilt from its pieces has %d bytes, want %d", rank, long.Len(), len(want))
		}
		if last := lines[len(lines)-1]; last != "tail-"+strconv.Itoa(rank) {
			t.Errorf("rank %d: last line %.60q, want the unterminated tail", rank, last)
		}
		if !strings.Contains(j.stderr.String(), fmt.Sprintf("[rank%d]: err r=%d i=250\n", rank, rank)) {
			t.Errorf("rank %d: stderr line missing", rank)
		}
	}

	// The log files hold each worker's raw output, without prefixes.
	roots, _ := filepath.Glob(filepath.Join(j.cfg.LogDir, "*_*"))
	if len(roots) != 1 {
		t.Fatalf("log dir holds %v, want one run directory", roots)
	}
	raw, err := os.ReadFile(filepath.Join(roots[0], "attempt_0", "1", "stdout.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(raw, []byte("r=1 i=0 n=1 a\n")) || !bytes.HasSuffix(raw, []byte("y\ntail-1")) {
		t.Errorf("stdout.log of local rank 1 is not the raw output: starts %.40q, ends %q", raw, raw[max(0, len(raw)-10):])
	}
	rawErr, err := os.ReadFile(filepath.Join(roots[0], "attempt_0", "2", "stderr.log"))
	if err != nil || !bytes.HasPrefix(rawErr, []byte("err r=2 i=0\n")) {
		t.Errorf("stderr.log of local rank 2: %.40q, %v", rawErr, err)
	}
}

// TestExitCodePropagation: a worker's exit status becomes the job's, and
// the other workers get SIGTERM.
func TestExitCodePropagation(t *testing.T) {
	j := newJob(t, 3, "sleep", map[int]string{1: "exit:7"})
	failed := j.failedAt()
	code, err := j.run(t, context.Background())
	if code != 7 || err != nil {
		t.Fatalf("Run = %d, %v; want 7, nil", code, err)
	}
	if d := time.Since(failed()); d > stopBound(j) {
		t.Errorf("Run took %v after the failure to stop the job, want at most %v", d, stopBound(j))
	}
	// A worker that had not installed its handler yet dies of SIGTERM
	// silently; the others report it.
	if out := j.stdout.String(); strings.Contains(out, "got interrupt") {
		t.Errorf("workers got SIGINT, want SIGTERM:\n%s", out)
	}
	if !strings.Contains(j.stderr.String(), "[rank1]: exiting with 7") {
		t.Errorf("failed worker's output missing")
	}
	if !strings.Contains(j.log.String(), "rank=1") || !strings.Contains(j.log.String(), "exit_code=7") {
		t.Errorf("launcher log does not name rank 1 and code 7:\n%s", j.log.String())
	}
	assertGone(t, pidsIn(t, j.dir()))
}

// TestWorkerKilled: one worker SIGKILLs itself once the others (and a child
// of one of them) sleep; they are all stopped, within stopBound, and the
// job exits 128+9.
func TestWorkerKilled(t *testing.T) {
	j := newJob(t, 3, "sleep", map[int]string{0: "killself", 2: "spawn"})
	j.setEnv(envPeers + "=2")
	failed := j.failedAt()
	code, err := j.run(t, context.Background())
	if code != 128+int(syscall.SIGKILL) || err != nil {
		t.Fatalf("Run = %d, %v; want %d, nil", code, err, 128+int(syscall.SIGKILL))
	}
	if d := time.Since(failed()); d > stopBound(j) {
		t.Errorf("the others were stopped %v after the failure, want within %v", d, stopBound(j))
	}
	for _, r := range []int{1, 2} {
		if !strings.Contains(j.stdout.String(), fmt.Sprintf("[rank%d]: rank %d got terminated", r, r)) {
			t.Errorf("rank %d did not report SIGTERM", r)
		}
	}
	if !strings.Contains(j.log.String(), "terminated by SIGKILL") {
		t.Errorf("launcher log does not say rank 0 was killed:\n%s", j.log.String())
	}
	pids := append(pidsIn(t, j.dir()), pidsIn(t, filepath.Join(j.dir(), "child"))...)
	if len(pids) != 3 {
		t.Fatalf("%d pid files, want 2 workers and 1 child", len(pids))
	}
	assertGone(t, pids)
}

// TestStopEscalatesToKill: a worker that ignores SIGTERM is SIGKILLed when
// StopTimeout has passed, and not before.
func TestStopEscalatesToKill(t *testing.T) {
	j := newJob(t, 2, "sleep-ignore", map[int]string{1: "killself"})
	j.setEnv(envPeers + "=1")
	timeouts := launch.StopTimeouts(t)
	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		code, err := launch.Run(context.Background(), j.cfg)
		done <- result{code, err}
	}()
	var r result
	select {
	case timeout := <-timeouts: // rank 1 died; rank 0 got SIGTERM
		if timeout.D != j.cfg.StopTimeout {
			t.Errorf("the stop waits %v, want StopTimeout %v", timeout.D, j.cfg.StopTimeout)
		}
		pids := pidsIn(t, j.dir())
		if len(pids) != 1 || !isLive(pids[0]) {
			t.Errorf("rank 0 (pids %v) is not running before the stop timeout", pids)
		}
		select {
		case r = <-done:
			t.Fatalf("Run = %d, %v before the stop timeout passed", r.code, r.err)
		default:
		}
		timeout.Pass()
		r = <-done
	case r = <-done:
	}
	if r.code != 137 || r.err != nil {
		t.Fatalf("Run = %d, %v; want 137, nil\nlauncher log:\n%s", r.code, r.err, j.log.String())
	}
	if !strings.Contains(j.log.String(), "did not stop in time") {
		t.Errorf("no escalation logged:\n%s", j.log.String())
	}
	assertGone(t, pidsIn(t, j.dir()))
}

// TestRestartOnce: with --max-restarts 1 a worker that dies once is
// restarted with all the others, and sees restart count 1.
func TestRestartOnce(t *testing.T) {
	j := newJob(t, 2, "restart", map[int]string{1: "dieonce"})
	j.cfg.MaxRestarts = 1
	code, err := j.run(t, context.Background())
	if code != 0 || err != nil {
		t.Fatalf("Run = %d, %v; want 0, nil", code, err)
	}
	out := j.stdout.String()
	for _, want := range []string{"[rank1]: dying once", "[rank1]: restart=1", "[rank0]: restart=1"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(out, "[rank1]: restart=0") {
		t.Errorf("rank 1 succeeded in attempt 0")
	}
	if !strings.Contains(j.log.String(), "restarting workers") {
		t.Errorf("restart not logged:\n%s", j.log.String())
	}
}

func TestRestartsExhausted(t *testing.T) {
	j := newJob(t, 2, "restart", map[int]string{0: "exit:5"})
	j.cfg.MaxRestarts = 2
	code, err := j.run(t, context.Background())
	if code != 5 || err != nil {
		t.Fatalf("Run = %d, %v; want 5, nil", code, err)
	}
	if n := strings.Count(j.stderr.String(), "[rank0]: exiting with 5"); n != 3 {
		t.Errorf("rank 0 ran %d times, want 3 (1 + 2 restarts)", n)
	}
}

// TestContextCancel: ending ctx sends the workers SIGTERM (or the signal a
// SignalError cause names) and Run returns promptly with 128+signal.
func TestContextCancel(t *testing.T) {
	for _, tc := range []struct {
		cause error
		sig   syscall.Signal
	}{
		{nil, syscall.SIGTERM},
		{&launch.SignalError{Signal: syscall.SIGINT}, syscall.SIGINT},
	} {
		t.Run(tc.sig.String(), func(t *testing.T) {
			j := newJob(t, 2, "sleep", nil)
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			var mu sync.Mutex
			var at time.Time
			cancelled := func() time.Time { mu.Lock(); defer mu.Unlock(); return at }
			go func() {
				waitForFiles(t, j.dir(), 2)
				mu.Lock()
				at = time.Now()
				mu.Unlock()
				cancel(tc.cause)
			}()
			code, err := j.run(t, ctx)
			if code != 128+int(tc.sig) || !errors.Is(err, launch.ErrInterrupted) || !errors.Is(err, context.Canceled) {
				t.Fatalf("Run = %d, %v; want %d and ErrInterrupted", code, err, 128+int(tc.sig))
			}
			if d := time.Since(cancelled()); d > stopBound(j) {
				t.Errorf("Run returned %v after the cancellation, want at most %v", d, stopBound(j))
			}
			for r := range 2 {
				if want := fmt.Sprintf("[rank%d]: rank %d got %v", r, r, tc.sig); !strings.Contains(j.stdout.String(), want) {
					t.Errorf("output lacks %q", want)
				}
			}
			assertGone(t, pidsIn(t, j.dir()))
		})
	}
}

// TestLeftoverChildrenStopped: a worker that exits 0 but leaves a child in
// its process group does not leave it running after the job.
func TestLeftoverChildrenStopped(t *testing.T) {
	j := newJob(t, 1, "spawn-exit", nil)
	code, err := j.run(t, context.Background())
	if code != 0 || err != nil {
		t.Fatalf("Run = %d, %v", code, err)
	}
	pids := pidsIn(t, filepath.Join(j.dir(), "child"))
	if len(pids) != 1 {
		t.Fatalf("%d child pid files, want 1", len(pids))
	}
	assertGone(t, pids)
	if !strings.Contains(j.log.String(), "left processes") {
		t.Errorf("leftover not logged:\n%s", j.log.String())
	}
}

func TestAnyProgram(t *testing.T) {
	j := newJob(t, 2, "", nil)
	j.cfg.Program, j.cfg.Args = "sh", []string{"-c", `echo "$RANK/$WORLD_SIZE"; exit $((3 * RANK))`}
	code, err := j.run(t, context.Background())
	if code != 3 || err != nil {
		t.Fatalf("Run = %d, %v; want rank 1's 3", code, err)
	}
	if !strings.Contains(j.stdout.String(), "[rank1]: 1/2\n") {
		t.Errorf("stdout %q", j.stdout.String())
	}
}

// TestStartFailure: a program that exists but cannot be executed is a
// launcher error naming it, and leaves nothing running.
func TestStartFailure(t *testing.T) {
	prog := filepath.Join(t.TempDir(), "not-a-program")
	if err := os.WriteFile(prog, []byte("\x00\x01garbage"), 0o755); err != nil {
		t.Fatal(err)
	}
	j := newJob(t, 2, "env", nil)
	j.cfg.Program = prog
	code, err := j.run(t, context.Background())
	if code != 1 || err == nil || !strings.Contains(err.Error(), prog) || !strings.Contains(err.Error(), "rank 0") {
		t.Fatalf("Run = %d, %v; want 1 and an error naming the program and rank 0", code, err)
	}
}

func TestLogDirNotCreatable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	j := newJob(t, 1, "env", nil)
	j.cfg.LogDir = filepath.Join(file, "logs")
	code, err := j.run(t, context.Background())
	if code != 1 || err == nil || !strings.Contains(err.Error(), "log directory") {
		t.Fatalf("Run = %d, %v; want 1 and a log directory error", code, err)
	}
}

// TestLauncherKilled: workers do not outlive a launcher that is SIGKILLed
// (and so cannot stop them itself).
func TestLauncherKilled(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("parent-death signal is Linux only")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := exec.Command(exe)
	cmd.Env = append(withoutKeys(os.Environ(), append([]string{testproc.WorkerEnv, envAction, envDir}, contractVars...)...),
		testproc.Env("launcher"), envAction+"=sleep", envDir+"="+dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitForFiles(t, dir, 2)
	cmd.Process.Kill()
	cmd.Wait()
	pids := pidsIn(t, dir)
	if len(pids) != 2 {
		t.Fatalf("%d worker pid files, want 2", len(pids))
	}
	assertGone(t, pids)
}

// TestEscapedChildDoesNotHoldUpRun: a worker's child that left its process
// group (setsid) but holds the stdout pipe cannot be stopped by the
// launcher, and must not keep Run from returning: Run returns while the
// child still runs (it sleeps for a minute), soon after the worker
// exited.
func TestEscapedChildDoesNotHoldUpRun(t *testing.T) {
	j := newJob(t, 1, "escape", nil)
	childDir := filepath.Join(j.dir(), "child")
	t.Cleanup(func() {
		for _, pid := range pidsIn(t, childDir) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	code, err := j.run(t, context.Background())
	returned := time.Now()
	if code != 0 || err != nil {
		t.Fatalf("Run = %d, %v", code, err)
	}
	pids := pidsIn(t, childDir)
	if len(pids) != 1 || !isLive(pids[0]) {
		t.Fatalf("the escaped child (pids %v) is not running when Run returns: Run waited for it", pids)
	}
	// The worker exits once its child has written its pid file, and its
	// output drains for at most a second after that.
	fi, err := os.Stat(filepath.Join(childDir, "pid-0"))
	if err != nil {
		t.Fatal(err)
	}
	if d, bound := returned.Sub(fi.ModTime()), 10*time.Second; d > bound {
		t.Errorf("Run returned %v after the worker's child was up, want at most %v", d, bound)
	}
	if !strings.Contains(j.stdout.String(), "[rank0]: parent done\n") {
		t.Errorf("worker output lost: %q", j.stdout.String())
	}
}

// TestOneAttemptForAnOuterLauncher: RestartCount, NoRestart, AgentStore
// and OnWorkerFailure, which a launcher of several nodes runs each
// attempt with.
func TestOneAttemptForAnOuterLauncher(t *testing.T) {
	j := newJob(t, 2, "restart", map[int]string{1: "noisy:4"})
	j.cfg.MaxRestarts, j.cfg.RestartCount, j.cfg.NoRestart, j.cfg.AgentStore = 3, 2, true, true
	var early, final []launch.Failure
	j.cfg.OnWorkerFailure = func(f launch.Failure) { early = append(early, f) }
	j.cfg.OnFailure = func(f launch.Failure) { final = append(final, f) }
	code, err := j.run(t, context.Background())
	if code != 4 || err != nil {
		t.Fatalf("Run = %d, %v; want 4, nil (no restart)", code, err)
	}
	if len(early) != 1 || early[0].Rank != 1 || early[0].ExitCode != 4 {
		t.Errorf("OnWorkerFailure got %+v, want rank 1 exit 4 once", early)
	}
	if len(final) != 1 || final[0].Restarts != 2 || final[0].MaxRestarts != 3 || len(final[0].Stderr) == 0 {
		t.Errorf("OnFailure got %+v, want one report of restart 2 of 3 with stderr", final)
	}

	// Rank 0's own output may not get out before rank 1's failure stops
	// it: the workers' view of RestartCount is checked on a clean run.
	j = newJob(t, 1, "env", nil)
	j.cfg.AgentStore, j.cfg.RestartCount, j.cfg.NoRestart = true, 2, true
	if code, err := j.run(t, context.Background()); code != 0 || err != nil {
		t.Fatalf("Run = %d, %v", code, err)
	}
	for _, want := range []string{"TORCHELASTIC_USE_AGENT_STORE=True", "GOTRAIN_RESTART_COUNT=2", "TORCHELASTIC_RESTART_COUNT=2"} {
		if !strings.Contains(j.stdout.String(), want) {
			t.Errorf("the worker's environment lacks %s:\n%s", want, j.stdout.String())
		}
	}
}

// TestEnvOffsetNode runs node 1 of a job whose hosts have 1 and 2 slots:
// its workers are ranks 1 and 2 of 3, in their environment, their output
// prefixes, their events and the root-cause report of one that fails.
func TestEnvOffsetNode(t *testing.T) {
	j := newJob(t, 2, "", nil)
	j.cfg.Standalone = false
	j.cfg.NNodes, j.cfg.NodeRank, j.cfg.RankOffset, j.cfg.WorldSize = 2, 1, 1, 3
	j.cfg.MasterAddr, j.cfg.MasterPort = "10.9.8.7", 29555
	j.setEnv("GOTRAIN_TOKEN=shared-secret")
	var events []int
	j.cfg.Events = func(rank int, _ []byte) { events = append(events, rank) }
	// Local rank 1 fails once local rank 0 has surely finished.
	j.cfg.Program, j.cfg.Args = "sh", []string{"-c", `env; printf 'e\n' >&3; [ "$LOCAL_RANK" = 1 ] && { sleep 0.3; echo "bad step" >&2; exit 5; }; exit 0`}
	var fails []launch.Failure
	j.cfg.OnFailure = func(f launch.Failure) { fails = append(fails, f) }
	code, err := j.run(t, context.Background())
	if code != 5 || err != nil {
		t.Fatalf("Run = %d, %v; want 5, nil", code, err)
	}
	byRank := map[int]map[string]string{}
	for r, lines := range linesOf(t, j.stdout.String()) {
		env := map[string]string{}
		for _, l := range lines {
			if k, v, ok := strings.Cut(l, "="); ok {
				env[k] = v
			}
		}
		byRank[r] = env
	}
	if len(byRank) != 2 || byRank[1] == nil || byRank[2] == nil {
		t.Fatalf("output from ranks %v, want ranks 1 and 2", slices.Collect(maps.Keys(byRank)))
	}
	for local, rank := range []int{1, 2} {
		got := byRank[rank]
		want := map[string]string{
			"RANK": strconv.Itoa(rank), "LOCAL_RANK": strconv.Itoa(local),
			"WORLD_SIZE": "3", "LOCAL_WORLD_SIZE": "2",
			"GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2",
			"ROLE_RANK": strconv.Itoa(rank), "ROLE_WORLD_SIZE": "3",
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("rank %d: %s=%q, want %q", rank, k, got[k], v)
			}
		}
	}
	slices.Sort(events)
	if !slices.Equal(events, []int{1, 2}) {
		t.Errorf("events from ranks %v, want [1 2]", events)
	}
	if len(fails) != 1 || fails[0].Rank != 2 || fails[0].LocalRank != 1 || !slices.Contains(fails[0].Stderr, "bad step") {
		t.Errorf("root cause %+v, want rank 2 (local rank 1) with its stderr", fails)
	}
	if !strings.Contains(j.stderr.String(), "[rank2]: bad step\n") {
		t.Errorf("stderr lacks [rank2]: bad step:\n%s", j.stderr.String())
	}
}

// TestRankOffsetErrors: an offset or world size that cannot place the
// node's workers is refused before any starts.
func TestRankOffsetErrors(t *testing.T) {
	for _, tc := range []struct {
		name                       string
		node, offset, world, nproc int
		want                       string
	}{
		{"negative offset", 1, -1, 3, 1, "must not be negative"},
		{"offset below node rank", 2, 1, 5, 1, "rank offset 1 is below node rank 2"},
		{"ranks past the world", 1, 2, 3, 2, "ranks 2..3 do not fit in world size 3"},
		{"world too small", 1, 0, 3, 2, "ranks 2..3 do not fit in world size 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := newJob(t, tc.nproc, "env", nil)
			j.cfg.Standalone, j.cfg.MasterAddr = false, "10.9.8.7"
			j.cfg.NNodes, j.cfg.NodeRank, j.cfg.RankOffset, j.cfg.WorldSize = 3, tc.node, tc.offset, tc.world
			j.setEnv("GOTRAIN_TOKEN=t")
			code, err := launch.Run(context.Background(), j.cfg)
			if !errors.Is(err, launch.ErrConfig) || !strings.Contains(err.Error(), tc.want) || code != 1 {
				t.Fatalf("Run = %d, %v; want ErrConfig mentioning %q", code, err, tc.want)
			}
		})
	}
}
