package main

// The example under the engines users start it with: Slurm (srun and an
// sbatch of examples/slurm), Open MPI's mpirun and MPICH's mpiexec, none
// of which sets MASTER_ADDR, and the environments Kubeflow's operators
// set, replayed. Each engine's test skips when the engine is missing,
// unless GOTRAIN_REQUIRE_ENGINES=1.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testenv"
	"github.com/gotrain/gotrain/internal/testlog"
	"github.com/gotrain/gotrain/internal/testnet"
	"github.com/gotrain/gotrain/internal/testproc"
)

// needEngine returns the path of each program, skipping the test (failing
// it under GOTRAIN_REQUIRE_ENGINES=1) when one is missing.
func needEngine(t *testing.T, progs ...string) []string {
	t.Helper()
	var paths []string
	for _, p := range progs {
		paths = append(paths, testenv.LookPath(t, p))
	}
	return paths
}

// workerEnv is the environment an engine passes on to the example's
// workers: this test binary runs main, no launcher variable is inherited,
// one compute thread each.
func workerEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case k == "RANK", k == "WORLD_SIZE", k == "LOCAL_RANK", k == "LOCAL_WORLD_SIZE", k == "MASTER_ADDR", k == "MASTER_PORT",
			strings.HasPrefix(k, "SLURM_"), strings.HasPrefix(k, "OMPI_"), strings.HasPrefix(k, "PMI_"), strings.HasPrefix(k, "PET_"):
		default:
			env = append(env, kv)
		}
	}
	return append(append(env, testproc.Env("main"), "GOTRAIN_NUM_THREADS=1", "GOTRAIN_TOKEN=engine-test"), extra...)
}

// testBinary is this test binary, which runs the example's main as a
// worker.
func testBinary(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// runEngine runs a launcher to completion within d and returns its
// stdout, failing the test on a non-zero exit.
func runEngine(t *testing.T, d time.Duration, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// mpiTrainArgs are the example's flags under the MPI launchers.
var mpiTrainArgs = []string{"--epochs", "1", "--max-steps", "30"}

func TestOpenMPI(t *testing.T) {
	mpirun := needEngine(t, "mpirun.openmpi")[0]
	out := runEngine(t, 90*time.Second, workerEnv(), mpirun,
		append([]string{"--allow-run-as-root", "--oversubscribe", "-np", "3", testBinary(t)}, mpiTrainArgs...)...)
	checkSummary(t, out, "3")
}

func TestMPICHHydra(t *testing.T) {
	mpiexec := needEngine(t, "mpiexec.hydra")[0]
	out := runEngine(t, 90*time.Second, workerEnv(), mpiexec,
		append([]string{"-n", "3", testBinary(t)}, mpiTrainArgs...)...)
	checkSummary(t, out, "3")
}

// A worker killed with SIGKILL mid-training ends the whole job with a
// non-zero status within 10 s, under either MPI launcher.
func TestMPIKilledWorker(t *testing.T) {
	for _, tc := range []struct {
		launcher string
		args     []string
	}{
		{"mpirun.openmpi", []string{"--allow-run-as-root", "--oversubscribe", "-np", "3"}},
		{"mpiexec.hydra", []string{"-n", "3"}},
	} {
		t.Run(tc.launcher, func(t *testing.T) {
			launcher := needEngine(t, tc.launcher)[0]
			mark := fmt.Sprintf("GOTRAIN_ENGINE_TEST=%s-%d", tc.launcher, time.Now().UnixNano())
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, launcher, append(tc.args, testBinary(t), "--epochs", "20")...)
			cmd.Env = workerEnv(mark)
			var out testlog.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			cmd.WaitDelay = 5 * time.Second
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			var pids []int
			for len(pids) < 3 {
				select {
				case err := <-done:
					t.Fatalf("%s exited before its 3 workers ran: %v\n%s", tc.launcher, err, out.String())
				case <-time.After(100 * time.Millisecond):
				}
				pids = processesWith(mark)
			}
			// They have joined the group and trained once rank 0 reports
			// its first epoch; the second is under way.
			if !testproc.Poll(60*time.Second, func() bool { return epochDone.MatchString(out.String()) }) {
				t.Fatalf("%s: no epoch done in 60 s\n%s", tc.launcher, out.String())
			}
			victim := pids[len(pids)-1]
			if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			select {
			case err := <-done:
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() == 0 {
					t.Fatalf("%s after a worker's SIGKILL: %v, want a non-zero exit\n%s", tc.launcher, err, out.String())
				}
				if d := time.Since(killed); d > 10*time.Second {
					t.Fatalf("%s took %v after a worker's SIGKILL, want at most 10s", tc.launcher, d)
				}
				t.Logf("%s exited %d %v after worker %d's SIGKILL", tc.launcher, ee.ExitCode(), time.Since(killed).Round(time.Millisecond), victim)
			case <-time.After(10 * time.Second):
				t.Fatalf("%s still runs 10s after a worker's SIGKILL\n%s", tc.launcher, out.String())
			}
			for _, p := range pids {
				if syscall.Kill(p, 0) == nil && processHas(p, mark) {
					t.Errorf("worker %d outlived its job", p)
					syscall.Kill(p, syscall.SIGKILL)
				}
			}
		})
	}
}

// processesWith lists the processes whose environment holds kv.
// epochDone matches rank 0's line at the end of its first epoch.
var epochDone = regexp.MustCompile(`(?m)epoch 1/\d+: \d+ steps train_loss `)

func processesWith(kv string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err == nil && pid != os.Getpid() && processHas(pid, kv) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func processHas(pid int, kv string) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
	if err != nil {
		return false
	}
	for _, s := range bytes.Split(b, []byte{0}) {
		if string(s) == kv {
			// The launcher itself has the mark too; a worker runs main.
			return bytes.Contains(b, []byte(testproc.Env("main")+"\x00")) && !isLauncher(pid)
		}
	}
	return false
}

// isLauncher reports whether pid is an MPI launcher or proxy rather than a
// worker.
func isLauncher(pid int) bool {
	b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm"))
	comm := strings.TrimSpace(string(b))
	return strings.HasPrefix(comm, "mpirun") || strings.HasPrefix(comm, "mpiexec") || strings.HasPrefix(comm, "hydra") || strings.HasPrefix(comm, "orted") || strings.HasPrefix(comm, "prte")
}

// freePort is a free loopback port as a string.
func freePort(t *testing.T) string { return strconv.Itoa(testnet.FreePort(t)) }

// Incomplete or contradictory engine variables fail the worker with one
// line naming them; it never trains alone as a world of one.
func TestEngineEnvRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		want string
	}{
		{"slurm batch script", []string{"SLURM_JOB_ID=9", "SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_LOCALID=0"}, "start the workers with srun"},
		{"slurm rank exported once", []string{"SLURM_JOB_ID=9", "SLURM_STEP_ID=0", "SLURM_PROCID=1", "SLURM_NTASKS=2", "SLURM_LOCALID=0",
			"SLURM_NODEID=1", "SLURM_NNODES=2", "SLURM_STEP_TASKS_PER_NODE=1(x2)", "SLURM_STEP_NODELIST=n[1-2]", "RANK=0"}, "RANK=0 contradicts SLURM_PROCID=1"},
		{"open mpi across nodes", []string{"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=4", "OMPI_COMM_WORLD_LOCAL_RANK=1", "OMPI_COMM_WORLD_LOCAL_SIZE=2"}, "mpirun -x MASTER_ADDR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			e := start(ctx, t, tc.env, "--max-steps", "1")
			err := e.cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 {
				t.Fatalf("exit %v, want status 1\nstdout:\n%s\nstderr:\n%s", err, e.stdout.String(), e.stderr.String())
			}
			if !strings.Contains(e.stderr.String(), tc.want) || e.stdout.Len() != 0 {
				t.Fatalf("stderr %q, want %q and no summary", e.stderr.String(), tc.want)
			}
		})
	}
}
