package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/internal/testetcd"
	"github.com/gotrain/gotrain/internal/testnet"
)

// elasticNode is one node's `gotrain run` launcher in an elastic test.
type elasticNode struct {
	name string
	cmd  *exec.Cmd
	out  *output // rings the test's bell, as does the node's exit
	done chan struct{}
	err  error
	// stopped: the test sent the launcher SIGSTOP, so only SIGKILL ends it.
	stopped bool
}

func (n *elasticNode) exited() bool {
	select {
	case <-n.done:
		return true
	default:
		return false
	}
}

// elasticJob is the MNIST job of the elastic tests: one epoch, resumed
// from a checkpoint shared by the nodes (they are all this host), which
// rank 0 writes every 20 steps. A round of fewer than 3 nodes closes
// lastCall after the second has joined.
func elasticJob(t *testing.T, backend, endpoint, id, ckpt string, lastCall time.Duration) []string {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return []string{"run", "--nnodes", "2:3", "--rdzv-backend", backend, "--rdzv-endpoint", endpoint, "--rdzv-id", id,
		"--rdzv-conf", fmt.Sprintf("last_call_timeout=%g,keep_alive_interval=0.5,keep_alive_max_attempts=4", lastCall.Seconds()),
		"--max-restarts", "3", "--stop-timeout", "1s",
		self, "train", "mnist", "--save", ckpt, "--resume", "--save-every", "20", "--progress=false"}
}

// startNode starts a node whose output and exit ring b.
func startNode(ctx context.Context, t *testing.T, b *bell, name string, args []string) *elasticNode {
	t.Helper()
	cmd := gotrainCmd(ctx, t, args...)
	cmd.Env = append(cmd.Env, "GOTRAIN_TOKEN=0123456789abcdef0123456789abcdef", "GOTRAIN_SHM=0", "GOTRAIN_NUM_THREADS=1",
		"GOTRAIN_ALLOW_LOOPBACK=1") // every "node" is this host
	n := &elasticNode{name: name, cmd: cmd, out: newOutput(b), done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = n.out, n.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		n.err = cmd.Wait()
		close(n.done)
		b.ring()
	}()
	t.Cleanup(func() {
		if !n.exited() {
			if n.stopped {
				cmd.Process.Kill() // its reaper stops its worker
			} else {
				cmd.Process.Signal(syscall.SIGTERM)
			}
			<-n.done
		}
	})
	return n
}

// dump is every node's output, for a failure message.
func dump(nodes []*elasticNode) string {
	var b strings.Builder
	for _, n := range nodes {
		fmt.Fprintf(&b, "\n===== node %s:\n%s", n.name, n.out.String())
	}
	return b.String()
}

var startedRe = regexp.MustCompile(`msg="launch: starting workers".* round=(\d+) node_rank=(\d+) nnodes=(\d+) .*restart_count=(\d+)[ \n]`)

// waitRound waits until every node of nodes starts its workers in round
// with nnodes nodes and returns their node ranks, checked to be dense
// (0..nnodes-1), and the group's restart count. b is the nodes' bell.
func waitRound(t *testing.T, b *bell, all, nodes []*elasticNode, round, nnodes int) (map[*elasticNode]int, int) {
	t.Helper()
	ranks := map[*elasticNode]int{}
	restarts := -1
	formed := b.waitFor(30*time.Second, func() bool {
		for _, n := range nodes {
			if n.exited() {
				t.Fatalf("node %s exited (%v) before round %d:%s", n.name, n.err, round, dump(all))
			}
			for _, m := range startedRe.FindAllStringSubmatch(n.out.String(), -1) {
				if r, _ := strconv.Atoi(m[1]); r == round {
					if got, _ := strconv.Atoi(m[3]); got != nnodes {
						t.Fatalf("node %s: round %d has %s nodes; want %d:%s", n.name, round, m[3], nnodes, dump(all))
					}
					ranks[n], _ = strconv.Atoi(m[2])
					rc, _ := strconv.Atoi(m[4])
					if restarts >= 0 && rc != restarts {
						t.Fatalf("nodes disagree on round %d's restart count:%s", round, dump(all))
					}
					restarts = rc
				}
			}
		}
		return len(ranks) == len(nodes)
	})
	if !formed {
		t.Fatalf("round %d of %d nodes not formed by every node in 30s:%s", round, nnodes, dump(all))
	}
	var got []int
	for _, r := range ranks {
		got = append(got, r)
	}
	slices.Sort(got)
	for i, r := range got {
		if r != i {
			t.Fatalf("round %d: node ranks %v, want 0..%d:%s", round, got, nnodes-1, dump(all))
		}
	}
	return ranks, restarts
}

// ckptStep is the step of the training checkpoint beside ckpt (-1 while
// there is none).
func ckptStep(ckpt string) (step, epoch int) {
	_, meta, err := checkpoint.ReadTensorsFile(checkpoint.TrainingPath(ckpt))
	if err != nil {
		return -1, -1
	}
	step, _ = strconv.Atoi(meta["step"])
	epoch, _ = strconv.Atoi(meta["epoch"])
	return step, epoch
}

// ckptWorld is the world size that wrote the training checkpoint (its
// sampler's replicas), or -1.
func ckptWorld(ckpt string) int {
	_, meta, err := checkpoint.ReadTensorsFile(checkpoint.TrainingPath(ckpt))
	if err != nil {
		return -1
	}
	var extra struct {
		Sampler struct{ Replicas int }
	}
	if json.Unmarshal([]byte(meta["extra"]), &extra) != nil {
		return -1
	}
	return extra.Sampler.Replicas
}

// waitStep waits until the checkpoint is past step and returns its step.
func waitStep(t *testing.T, all []*elasticNode, ckpt string, step int) int {
	t.Helper()
	return waitStepOf(t, all, ckpt, step, 0)
}

// waitStepOf waits until the checkpoint is past step, written by a world
// of world ranks (any, if 0), and returns its step: a group that has just
// re-formed may still see the last save of the group before it land.
func waitStepOf(t *testing.T, all []*elasticNode, ckpt string, step, world int) int {
	t.Helper()
	s := -1
	passed := func() bool {
		s, _ = ckptStep(ckpt)
		return s > step && (world == 0 || ckptWorld(ckpt) == world)
	}
	if !waitDir(t, filepath.Dir(ckpt), 30*time.Second, passed) {
		t.Fatalf("the checkpoint did not pass step %d in 30s:%s", step, dump(all))
	}
	return s
}

func rankZero(ranks map[*elasticNode]int) *elasticNode {
	for n, r := range ranks {
		if r == 0 {
			return n
		}
	}
	return nil
}

// waitSuccess waits for nodes to exit 0, and returns the one whose
// output ends with the job's summary.
func waitSuccess(t *testing.T, all, nodes []*elasticNode) *elasticNode {
	t.Helper()
	var summarizer *elasticNode
	for _, n := range nodes {
		select {
		case <-n.done:
		case <-time.After(60 * time.Second):
			t.Fatalf("node %s still running 60s after the last re-form:%s", n.name, dump(all))
		}
		if n.err != nil {
			t.Fatalf("node %s: %v:%s", n.name, n.err, dump(all))
		}
		if strings.Contains(n.out.String(), "model=mlp world=") {
			summarizer = n
		}
	}
	if summarizer == nil {
		t.Fatalf("no node printed the job's summary:%s", dump(all))
	}
	return summarizer
}

// lastResume is the step of the last resume the node's rank 0 logged.
func lastResume(n *elasticNode) int {
	m := regexp.MustCompile(`\[rank0\]: .*msg=resumed .*step=(\d+)`).FindAllStringSubmatch(n.out.String(), -1)
	if len(m) == 0 {
		return -1
	}
	s, _ := strconv.Atoi(m[len(m)-1][1])
	return s
}

// TestElasticEtcd: three nodes form a group of 3; one is killed, and the
// other two re-form a world of 2 and carry on from the checkpoint; a
// fourth arrives and the group grows to 3 (not counted as a failure);
// the node holding rank 0 is killed, and the last two finish the epoch
// from the checkpoint: with etcd no gotrain process holds the state.
func TestElasticEtcd(t *testing.T) {
	endpoint := testetcd.Start(t)
	ckpt := filepath.Join(t.TempDir(), "m.safetensors")
	// The three first nodes start together, and the first round must
	// wait for the slowest of them to join: on a loaded machine it may
	// come a second or more after the others.
	job := elasticJob(t, "etcd", endpoint, "etcd-test", ckpt, 3*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	b := &bell{}
	var all []*elasticNode
	for _, name := range []string{"a", "b", "c"} {
		all = append(all, startNode(ctx, t, b, name, job))
	}
	ranks, _ := waitRound(t, b, all, all, 0, 3)
	step := waitStep(t, all, ckpt, 0)

	var victim *elasticNode
	var alive []*elasticNode
	for _, n := range all {
		if ranks[n] != 0 && victim == nil {
			victim = n
		} else {
			alive = append(alive, n)
		}
	}
	victim.cmd.Process.Kill()
	_, restarts := waitRound(t, b, all, alive, 1, 2)
	if restarts != 1 {
		t.Fatalf("restart count %d after a node was lost; want 1:%s", restarts, dump(all))
	}
	step = waitStep(t, all, ckpt, step)

	d := startNode(ctx, t, b, "d", job)
	all = append(all, d)
	alive = append(alive, d)
	ranks, restarts = waitRound(t, b, all, alive, 2, 3)
	if restarts != 1 {
		t.Fatalf("restart count %d after a node arrived; want still 1:%s", restarts, dump(all))
	}
	step = waitStepOf(t, all, ckpt, step, 3)

	zero := rankZero(ranks)
	zero.cmd.Process.Kill()
	alive = slices.DeleteFunc(alive, func(n *elasticNode) bool { return n == zero })
	ranks, restarts = waitRound(t, b, all, alive, 3, 2)
	if restarts != 2 {
		t.Fatalf("restart count %d after rank 0's node was lost; want 2:%s", restarts, dump(all))
	}
	final := waitSuccess(t, all, alive)
	if final != rankZero(ranks) {
		t.Errorf("the summary came from node %s, not from rank 0's node", final.name)
	}
	if got := lastResume(final); got < step {
		t.Errorf("after rank 0's node was killed the group resumed at step %d, before the checkpoint's step %d it had reached", got, step)
	}
	// The checkpoint of the world of 3 re-sharded for 2 (DistributedSampler
	// and learning rate).
	if !regexp.MustCompile(`\[rank0\]: .*resuming in a world of another size.* was=3 world=2`).MatchString(final.out.String()) {
		t.Errorf("rank 0 of the last group did not resume the world of 3's checkpoint in a world of 2:%s", dump(all))
	}
	if !strings.Contains(final.out.String(), "world=2 epochs=1") {
		t.Errorf("the last group's summary is not of a world of 2 that finished epoch 1:%s", dump(all))
	}
	if _, epoch := ckptStep(ckpt); epoch != 1 {
		t.Errorf("the last checkpoint is at epoch %d; want the epoch finished (1)", epoch)
	}
}

// TestElasticC10d: two nodes meet at a c10d store that the first one
// serves, a third arrives (world 3), then that third one hangs and the
// first two finish from the checkpoint in a world of 2.
func TestElasticC10d(t *testing.T) {
	endpoint := testnet.FreeAddr(t)
	ckpt := filepath.Join(t.TempDir(), "m.safetensors")
	// Each node starts once the group before it has formed: a short last
	// call does not race them.
	job := elasticJob(t, "c10d", endpoint, "c10d-test", ckpt, time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	b := &bell{}
	host := startNode(ctx, t, b, "host", job)
	serving := b.waitFor(30*time.Second, func() bool {
		return host.exited() || strings.Contains(host.out.String(), "serving the c10d rendezvous store")
	})
	if !serving || host.exited() {
		t.Fatalf("the first node did not serve the store within 30 s (exited: %v, %v):\n%s", host.exited(), host.err, host.out.String())
	}
	all := []*elasticNode{host, startNode(ctx, t, b, "b", job)}
	waitRound(t, b, all, all, 0, 2)
	step := waitStep(t, all, ckpt, 0)

	c := startNode(ctx, t, b, "c", job)
	all = append(all, c)
	_, restarts := waitRound(t, b, all, all, 1, 3)
	if restarts != 0 {
		t.Fatalf("restart count %d after an arrival; want 0:%s", restarts, dump(all))
	}
	step = waitStepOf(t, all, ckpt, step, 3)

	// A node that hangs: its launcher stopped, so no heartbeat, while its
	// worker still runs; the others notice in keep_alive_interval ×
	// keep_alive_max_attempts (2 s) and re-form without it.
	c.stopped = true
	c.cmd.Process.Signal(syscall.SIGSTOP)
	ranks, restarts := waitRound(t, b, all, all[:2], 2, 2)
	if restarts != 1 {
		t.Fatalf("restart count %d after a node was lost; want 1:%s", restarts, dump(all))
	}
	final := waitSuccess(t, all, all[:2])
	if final != rankZero(ranks) {
		t.Errorf("the summary came from node %s, not from rank 0's node", final.name)
	}
	if got := lastResume(final); got < step {
		t.Errorf("the group of 2 resumed at step %d, before the checkpoint's step %d", got, step)
	}
	if _, epoch := ckptStep(ckpt); epoch != 1 {
		t.Errorf("the last checkpoint is at epoch %d; want 1", epoch)
	}
}

// TestElasticBadFlags: the elastic flags' mistakes exit 2 with one line.
func TestElasticBadFlags(t *testing.T) {
	for args, want := range map[string]string{
		"run --nnodes 3:2 --rdzv-endpoint 127.0.0.1:1 --rdzv-id x true":                             "gotrain: --nnodes 3:2: MIN is more than MAX\n",
		"run --nnodes 0:2 --rdzv-endpoint 127.0.0.1:1 --rdzv-id x true":                             "gotrain: --nnodes 0:2: MIN must be at least 1\n",
		"run --nnodes 1:3 --rdzv-backend zookeeper --rdzv-endpoint 127.0.0.1:1 --rdzv-id x true":    "gotrain: --rdzv-backend zookeeper: must be static, c10d or etcd\n",
		"run --nnodes 1:3 --rdzv-id x true":                                                         "gotrain: --nnodes: an elastic job (--nnodes 1:3) needs --rdzv-endpoint HOST:PORT, where the nodes meet\n",
		"run --nnodes 1:3 --rdzv-endpoint 127.0.0.1 --rdzv-id x true":                               "gotrain: --rdzv-endpoint 127.0.0.1: want HOST:PORT\n",
		"run --nnodes 1:3 --rdzv-endpoint 127.0.0.1:1 true":                                         "gotrain: --rdzv-id: an elastic job needs --rdzv-id ID, the same on every node and new for each job\n",
		"run --nnodes 1:3 --rdzv-endpoint 127.0.0.1:1 --rdzv-id x --node-rank 1 true":               "gotrain: --node-rank 1: the rendezvous assigns node ranks in an elastic job; leave it out\n",
		"run --nnodes 1:3 --rdzv-endpoint 127.0.0.1:1 --rdzv-id x --rdzv-conf foo=1 true":           "gotrain: --rdzv-conf foo=1: unknown key foo (want last_call_timeout, join_timeout, keep_alive_interval, keep_alive_max_attempts or is_host)\n",
		"run --nnodes 1:3 --rdzv-endpoint 127.0.0.1:1 --rdzv-id x --rdzv-conf join_timeout=-1 true": "gotrain: --rdzv-conf join_timeout=-1: join_timeout must be positive\n",
		"run --nnodes 1:3 --rdzv-backend static --rdzv-endpoint 127.0.0.1:1 --rdzv-id x true":       "gotrain: --rdzv-backend static: cannot re-form a group; an elastic --nnodes MIN:MAX needs c10d or etcd\n",
	} {
		all, _, code := runGotrain(t, 30*time.Second, strings.Fields(args)...)
		if code != 2 || all != want {
			t.Errorf("gotrain %s: exit %d, %q; want 2, %q", args, code, all, want)
		}
	}
}

// A Kubeflow operator's PET_MASTER_ADDR and PET_NODE_RANK beside an
// elastic job's rendezvous flags are overridden by the rendezvous, not
// refused: the job gets as far as its rendezvous (here: no token).
func TestElasticIgnoresPETPlace(t *testing.T) {
	t.Setenv("PET_MASTER_ADDR", "10.0.0.1")
	t.Setenv("PET_NODE_RANK", "1")
	t.Setenv("GOTRAIN_TOKEN", "")
	os.Unsetenv("GOTRAIN_TOKEN")
	all, _, code := runGotrain(t, 30*time.Second, "run", "--nnodes", "1:3", "--rdzv-endpoint", "127.0.0.1:1", "--rdzv-id", "x", "true")
	if code != 2 || !strings.Contains(all, "needs the same GOTRAIN_TOKEN") {
		t.Fatalf("exit %d, %q; want the token refused, not the PET_ variables", code, all)
	}
}
