package launch_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gotrain/gotrain/distributed/store"
	"github.com/gotrain/gotrain/internal/testproc"
	"github.com/gotrain/gotrain/launch"
)

// The "ftworker" of a fault-tolerant job records its start in the store
// the launcher serves (proving that the store outlives the workers) and
// in a file start-<rank>-<restart> holding its pid, replica ID and join
// mark, then waits for the file "finish" in its directory and exits 0.
func init() { workers["ftworker"] = ftWorker }

func ftWorker() int {
	rank, restart := os.Getenv("RANK"), os.Getenv(launch.EnvFTRestartCount)
	dir := os.Getenv(envDir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if os.Getenv("TORCHELASTIC_USE_AGENT_STORE") != "True" {
		fmt.Fprintln(os.Stderr, "ftworker: the store is not the launcher's")
		return 2
	}
	addr := net.JoinHostPort(os.Getenv("MASTER_ADDR"), os.Getenv("MASTER_PORT"))
	st, err := store.Dial(ctx, addr, []byte(os.Getenv("GOTRAIN_TOKEN")))
	if err != nil {
		fmt.Fprintln(os.Stderr, "ftworker:", err)
		return 2
	}
	starts, err := st.Add(ctx, "starts", 1)
	st.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ftworker:", err)
		return 2
	}
	rec := fmt.Sprintf("pid=%d id=%s join=%s replicas=%s min=%s starts=%d job_restart=%s",
		os.Getpid(), os.Getenv(launch.EnvFTReplicaID), os.Getenv(launch.EnvFTJoin),
		os.Getenv(launch.EnvFTReplicas), os.Getenv(launch.EnvFTMinReplicas), starts, os.Getenv("GOTRAIN_RESTART_COUNT"))
	writeFile(filepath.Join(dir, "start-"+rank+"-"+restart), rec)
	awaitFiles(filepath.Join(dir, "finish"), 1)
	return 0
}

func writeFile(path, s string) {
	tmp := path + ".tmp"
	os.WriteFile(tmp, []byte(s), 0o644)
	os.Rename(tmp, path)
}

// ftRecord is one ftworker start, parsed.
type ftRecord map[string]string

// awaitStart waits for the start file of rank after restart restarts.
func awaitStart(t *testing.T, dir string, rank, restart int) ftRecord {
	t.Helper()
	path := filepath.Join(dir, fmt.Sprintf("start-%d-%d", rank, restart))
	var data []byte
	ok := testproc.Poll(time.Minute, func() bool {
		var err error
		data, err = os.ReadFile(path)
		return err == nil
	})
	if !ok || data == nil {
		t.Fatalf("rank %d did not start (restart %d)", rank, restart)
	}
	rec := ftRecord{}
	for _, f := range strings.Fields(string(data)) {
		k, v, _ := strings.Cut(f, "=")
		rec[k] = v
	}
	return rec
}

func (r ftRecord) pid(t *testing.T) int {
	t.Helper()
	p, err := strconv.Atoi(r["pid"])
	if err != nil {
		t.Fatalf("start record %v: %v", r, err)
	}
	return p
}

// newFTJob is a fault-tolerant job of nproc ftworkers.
func newFTJob(t *testing.T, nproc, maxRestarts, minReplicas int) *job {
	j := newJob(t, nproc, "none", nil)
	j.setEnv(testproc.Env("ftworker"))
	j.cfg.FT, j.cfg.MaxRestarts, j.cfg.MinReplicas = true, maxRestarts, minReplicas
	j.cfg.ReplicaHost = "hostA"
	return j
}

type runResult struct {
	code int
	err  error
}

func startFT(t *testing.T, j *job) <-chan runResult {
	res := make(chan runResult, 1)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		<-res
	})
	go func() {
		code, err := launch.Run(ctx, j.cfg)
		res <- runResult{code, err}
		close(res)
	}()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("stdout:\n%s\nstderr:\n%s\nlauncher log:\n%s", j.stdout.String(), j.stderr.String(), j.log.String())
		}
	})
	return res
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// A killed worker of an FT job does not stop the others: it alone is
// restarted as a joining replica with its replica ID, the store (the
// launcher's) keeps what the workers wrote, and the job ends 0 when all
// finish.
func TestFTRestartsOnlyTheFailedWorker(t *testing.T) {
	j := newFTJob(t, 3, 2, 2)
	dir := j.dir()
	res := startFT(t, j)
	first := make([]ftRecord, 3)
	for r := range 3 {
		first[r] = awaitStart(t, dir, r, 0)
		if first[r]["join"] != "0" || first[r]["id"] != fmt.Sprintf("hostA-%03d", r) ||
			first[r]["replicas"] != "3" || first[r]["min"] != "2" {
			t.Fatalf("rank %d's first start: %v", r, first[r])
		}
	}
	if err := syscall.Kill(first[1].pid(t), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	again := awaitStart(t, dir, 1, 1)
	if again["join"] != "1" || again["id"] != first[1]["id"] || again["starts"] != "4" || again["job_restart"] != "0" {
		t.Errorf("rank 1's restart: %v; want join=1, id %s, starts=4 (the store kept the first three), job_restart=0 (the store keys' scope)", again, first[1]["id"])
	}
	for _, r := range []int{0, 2} {
		if !alive(first[r].pid(t)) {
			t.Errorf("rank %d (pid %s) did not survive rank 1's death", r, first[r]["pid"])
		}
		if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("start-%d-1", r))); err == nil {
			t.Errorf("rank %d was restarted too", r)
		}
	}
	writeFile(filepath.Join(dir, "finish"), "")
	got := <-res
	if got.code != 0 || got.err != nil {
		t.Fatalf("Run = %d, %v; want 0, nil", got.code, got.err)
	}
	log := j.log.String()
	for _, want := range []string{"the other 2 go on", "restart 1 of 2", "joining replica", "failures_survived=1"} {
		if !strings.Contains(log, want) {
			t.Errorf("launcher log lacks %q", want)
		}
	}
}

// With no restart left, the job goes on while at least MinReplicas
// workers live, and stops with the root cause below that.
func TestFTMinReplicas(t *testing.T) {
	t.Run("above", func(t *testing.T) {
		j := newFTJob(t, 3, 0, 2)
		dir := j.dir()
		res := startFT(t, j)
		var recs []ftRecord
		for r := range 3 {
			recs = append(recs, awaitStart(t, dir, r, 0))
		}
		syscall.Kill(recs[2].pid(t), syscall.SIGKILL)
		testproc.Poll(time.Minute, func() bool { return !alive(recs[2].pid(t)) })
		if !alive(recs[0].pid(t)) || !alive(recs[1].pid(t)) {
			t.Fatal("ranks 0 and 1 did not survive rank 2's death")
		}
		writeFile(filepath.Join(dir, "finish"), "")
		if got := <-res; got.code != 0 || got.err != nil {
			t.Fatalf("Run = %d, %v; want 0, nil", got.code, got.err)
		}
		if !strings.Contains(j.log.String(), "no restart left (--max-restarts 0); the other 2 go on") {
			t.Error("launcher log does not say the others go on")
		}
	})
	t.Run("below", func(t *testing.T) {
		j := newFTJob(t, 3, 0, 3)
		dir := j.dir()
		res := startFT(t, j)
		var recs []ftRecord
		for r := range 3 {
			recs = append(recs, awaitStart(t, dir, r, 0))
		}
		syscall.Kill(recs[1].pid(t), syscall.SIGKILL)
		got := <-res
		if got.code != 128+int(syscall.SIGKILL) || got.err != nil {
			t.Fatalf("Run = %d, %v; want %d (the root cause's), nil", got.code, got.err, 128+int(syscall.SIGKILL))
		}
		for _, r := range []int{0, 2} {
			if alive(recs[r].pid(t)) {
				t.Errorf("rank %d still runs after the job stopped", r)
			}
		}
		log := j.log.String()
		if !strings.Contains(log, "2 replicas remain, fewer than --min-replicas 3") || !strings.Contains(log, "rank=1") {
			t.Errorf("launcher log lacks the stop and its root cause:\n%s", log)
		}
	})
}

func TestFTConfigRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  launch.Config
		want string
	}{
		{"min above world", launch.Config{Program: "true", NProcPerNode: 2, FT: true, MinReplicas: 3}, "min-replicas 3 is more than the 2 workers"},
		{"min without ft", launch.Config{Program: "true", MinReplicas: 1}, "needs fault tolerance"},
		{"negative min", launch.Config{Program: "true", FT: true, MinReplicas: -1}, "at least 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, err := launch.Run(context.Background(), tc.cfg)
			if code != 1 || !errors.Is(err, launch.ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run = %d, %v; want 1 and ErrConfig saying %q", code, err, tc.want)
			}
		})
	}
}
