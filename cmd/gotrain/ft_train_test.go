package main

import (
	"context"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gotrain/gotrain/harness"
	"github.com/gotrain/gotrain/internal/testnet"
)

// committedRE matches a worker's "ft: committed" record (harness
// EnvFTTrace): its launcher rank, the step and the weights' hash.
var committedRE = regexp.MustCompile(`(?m)^\[rank(\d+)\]: .*msg="ft: committed" .*step=(\d+) weights=([0-9a-f]+)`)

// commits lists, per launcher rank, the step → weights hash of every
// committed step in out, in order.
type commit struct {
	step int
	hash string
	at   int // offset in the output
}

func commits(out string) map[int][]commit {
	cs := map[int][]commit{}
	for _, m := range committedRE.FindAllStringSubmatchIndex(out, -1) {
		r, _ := strconv.Atoi(out[m[2]:m[3]])
		s, _ := strconv.Atoi(out[m[4]:m[5]])
		cs[r] = append(cs[r], commit{step: s, hash: out[m[6]:m[7]], at: m[0]})
	}
	return cs
}

// TestFTTrainSurvivesAKilledWorker: `gotrain run --nproc-per-node 3
// gotrain train mnist --ft` with one worker SIGKILLed mid-training. The
// other two are never restarted and commit the next step; the killed one
// is restarted, heals from a peer (its weights equal theirs at every
// step it commits) and the job ends with a trained model and a summary
// that counts one failure survived and at most one step lost.
func TestFTTrainSurvivesAKilledWorker(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env := []string{harness.EnvFTTrace + "=1", "GOTRAIN_HEARTBEAT_TIMEOUT=3s"}
	p, out, code := startGotrain(t, ctx, env, "run", "--nproc-per-node", "3", "--max-restarts", "1", "--restart-backoff", "0",
		"--master-port", strconv.Itoa(testnet.FreePort(t)),
		self, "train", "mnist", "--ft", "--epochs", "1000", "--max-steps", "150", "--batch-size", "32", "--progress=false")
	var pids [3]int
	for r := range 3 {
		pids[r] = workerPID(t, p.Pid, r, 30*time.Second)
	}
	if !out.waitFor(time.Minute, func(s string) bool {
		cs := commits(s)
		return len(cs[0]) >= 20
	}) {
		t.Fatal("no 20 steps committed within a minute")
	}
	before := len(out.String())
	if err := syscall.Kill(pids[1], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// The survivors commit a step after the kill: the order, not a time.
	if !out.waitFor(time.Minute, func(s string) bool {
		for _, c := range commits(s)[0] {
			if c.at > before {
				return true
			}
		}
		return false
	}) {
		t.Fatal("rank 0 committed no step after rank 1 was killed")
	}
	t.Logf("rank 0 committed its next step %v after the kill", time.Since(killed).Round(time.Millisecond))
	for _, r := range []int{0, 2} {
		if err := syscall.Kill(pids[r], 0); err != nil {
			t.Errorf("rank %d (pid %d) is gone after rank 1's death: %v", r, pids[r], err)
		}
	}
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("gotrain run exited %d", c)
		}
	case <-ctx.Done():
		t.Fatal("the job did not finish")
	}
	s := out.String()
	cs := commits(s)
	// Rank 1's commits after its restart: each equals rank 0's hash of
	// that step, the first one at the step where it joined.
	var rejoined []commit
	for _, c := range cs[1] {
		if c.at > before {
			rejoined = append(rejoined, c)
		}
	}
	if len(rejoined) == 0 {
		t.Fatal("the restarted rank 1 committed no step")
	}
	ref := map[int]string{}
	for _, c := range cs[0] {
		ref[c.step] = c.hash
	}
	for _, c := range rejoined {
		if ref[c.step] != c.hash {
			t.Fatalf("restarted rank 1 at step %d has weights %s, rank 0 %q: it did not heal", c.step, c.hash, ref[c.step])
		}
	}
	t.Logf("rank 1 rejoined at step %d with rank 0's weights", rejoined[0].step)
	if last := cs[0][len(cs[0])-1]; last.step != 150 {
		t.Errorf("rank 0's last committed step is %d, want 150", last.step)
	}
	if strings.Contains(s, `restarting a failed worker as a joining replica" rank=0`) || strings.Contains(s, `restarting a failed worker as a joining replica" rank=2`) {
		t.Error("a survivor was restarted")
	}
	var line string
	for l := range strings.Lines(s) {
		if strings.HasPrefix(l, "[rank0]: model=") {
			line = l
		}
	}
	if line == "" {
		t.Fatalf("no summary line:\n%s", s)
	}
	kv := summary(t, line)
	if kv["failures_survived"] != "1" || num(t, kv, "steps_lost") > 1 || num(t, kv, "test_acc") < 0.5 {
		t.Errorf("summary %q: want failures_survived=1, steps_lost<=1 and a trained model", strings.TrimSpace(line))
	}
}

// TestFTNodeReplacedByHand: a job of two nodes started by hand (`gotrain
// run --ft --nnodes 2 --node-rank R`, on this machine) loses node 1, whose
// launcher is SIGKILLed; node 0 trains on alone; node 1 started again with
// --ft-join heals from node 0 (the same weights at every step it
// commits) and both finish.
func TestFTNodeReplacedByHand(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env := []string{harness.EnvFTTrace + "=1", "GOTRAIN_HEARTBEAT_TIMEOUT=3s", "GOTRAIN_ALLOW_LOOPBACK=1", "GOTRAIN_TOKEN=ft-test-token"}
	port := strconv.Itoa(testnet.FreePort(t))
	node := func(rank int, extra ...string) (*os.Process, *output, <-chan int) {
		args := append([]string{"run", "--ft", "--nnodes", "2", "--node-rank", strconv.Itoa(rank), "--nproc-per-node", "1",
			"--master-addr", "127.0.0.1", "--master-port", port}, extra...)
		args = append(args, self, "train", "mnist", "--ft", "--epochs", "1000", "--max-steps", "300", "--batch-size", "32", "--progress=false")
		return startGotrain(t, ctx, env, args...)
	}
	_, out0, code0 := node(0)
	p1, out1, _ := node(1)
	if !out0.waitFor(time.Minute, func(s string) bool { return len(commits(s)[0]) >= 10 }) {
		t.Fatal("no 10 steps committed within a minute")
	}
	if err := p1.Kill(); err != nil { // SIGKILL: its reaper stops its worker
		t.Fatal(err)
	}
	if !out0.waitFor(time.Minute, func(s string) bool { return strings.Contains(s, "ft: a replica left; the others train on") }) {
		t.Fatalf("node 0 did not go on without node 1; node 1:\n%s", out1.String())
	}
	_, again, code1 := node(1, "--ft-join")
	for i, code := range []<-chan int{code0, code1} {
		select {
		case c := <-code:
			if c != 0 {
				t.Fatalf("node %d exited %d", i, c)
			}
		case <-ctx.Done():
			t.Fatalf("node %d did not finish", i)
		}
	}
	ref := map[int]string{}
	for _, c := range commits(out0.String())[0] {
		ref[c.step] = c.hash
	}
	joined := commits(again.String())[1]
	if len(joined) == 0 {
		t.Fatalf("the replacement committed no step:\n%s", again.String())
	}
	for _, c := range joined {
		if ref[c.step] != c.hash {
			t.Fatalf("the replacement at step %d has weights %s, node 0 %q: it did not heal", c.step, c.hash, ref[c.step])
		}
	}
	t.Logf("the replacement joined at step %d with node 0's weights", joined[0].step)
}
