package ft

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gotrain/gotrain/ddp/localsgd"
	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/distributed/store"
	"github.com/gotrain/gotrain/internal/testproc"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// The outer-step worker's environment, besides the replica worker's.
const (
	envOuterH      = "FT_TEST_OUTER_H"       // inner steps per outer step
	envOuterKillAt = "FT_TEST_OUTER_KILL_AT" // SIGKILL itself in this inner step's outer step, before its reduction
)

// oneRank is a DiLoCo replica's group before its first quorum.
type oneRank struct{}

func (oneRank) Rank() int          { return 0 }
func (oneRank) Size() int          { return 1 }
func (oneRank) SharedMemory() bool { return false }
func (oneRank) AllReduce(context.Context, any, distributed.ReduceOp) error {
	return fmt.Errorf("no quorum yet")
}
func (oneRank) Broadcast(context.Context, any, int) error { return fmt.Errorf("no quorum yet") }
func (oneRank) AllGather(context.Context, any, any) error { return fmt.Errorf("no quorum yet") }

// outerState is the heal payload of the outer-step worker: the
// replica's parameters and its DiLoCo state (θ_global, the outer
// momentum, the inner step).
type outerState struct {
	Params  [][]float32          `json:"params"`
	Tensors map[string][]float32 `json:"tensors"`
	Shapes  map[string][]int     `json:"shapes"`
	Meta    map[string]string    `json:"meta"`
}

// outerWorker trains a tiny MLP with DiLoCo (SGD inside, every H inner
// steps an outer step) under a Manager that takes its quorum at the
// outer steps, and prints "outer step=S members=K pid=P sha=H" per
// committed outer step (H the sha256 of its parameters), "discarded
// step=S" for a dropped one, "healed step=S ..." after healing and
// "final ..." at the end.
func outerWorker(ctx context.Context) error {
	id := os.Getenv(envID)
	h := envInt(envOuterH, 4)
	steps := int64(envInt(envSteps, 40))
	killAt := int64(envInt(envOuterKillAt, -1))
	rejoin, bound := os.Getenv(envRejoin), int64(envInt(envBound, 20000))
	live, err := time.ParseDuration(os.Getenv(envLive))
	if err != nil {
		return fmt.Errorf("%s: %w", envLive, err)
	}
	module := nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
	nn.ResetParameters(module, tensor.NewRNG(1))
	m, err := localsgd.NewDiLoCo(ctx, module, oneRank{}, h)
	if err != nil {
		return err
	}
	params := m.Parameters()
	opt := optim.NewSGD(params, 0.05)
	shapes := make([][]int, len(params))
	for i, p := range params {
		shapes[i] = p.Shape()
	}
	var step int64 // inner steps taken
	snapshot := func() ([]byte, error) {
		sd := m.StateDict()
		st := outerState{Tensors: map[string][]float32{}, Shapes: map[string][]int{}, Meta: sd.Meta}
		for _, p := range params {
			st.Params = append(st.Params, p.Data())
		}
		for k, t := range sd.Tensors {
			st.Tensors[k], st.Shapes[k] = t.Data(), t.Shape()
		}
		return json.Marshal(st)
	}
	load := func(b []byte) error {
		var st outerState
		if err := json.Unmarshal(b, &st); err != nil {
			return err
		}
		sd := optim.State{Tensors: map[string]*tensor.Tensor{}, Meta: st.Meta}
		for k, v := range st.Tensors {
			sd.Tensors[k] = tensor.New(v, st.Shapes[k]...)
		}
		if err := m.LoadStateDict(sd); err != nil {
			return err
		}
		for i, p := range params {
			copy(p.Data(), st.Params[i])
		}
		step = m.Step()
		return nil
	}
	st, err := store.Dial(ctx, os.Getenv(envStore), []byte(testToken))
	if err != nil {
		return err
	}
	defer st.Close()
	log := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelInfo}))
	mgr, err := New(ctx, Config{
		ReplicaID: id, Store: st, StoreAddr: os.Getenv(envStore),
		Group:    distributed.Config{Token: testToken, Timeout: 30 * time.Second, JobID: "ftouter", Logger: log},
		Replicas: envInt(envReplica, 3), MinReplicas: 1, Liveness: live, QuorumTimeout: 3 * live,
		ModelHash: ShapeHash(shapes, "diloco", strconv.Itoa(h)),
		Step:      int64(envInt(envStep, 0)),
		Snapshot:  snapshot, Load: load, Logger: log,
	})
	if err != nil {
		return err
	}
	defer mgr.Close()
	silent, left := false, false
	// outer takes the quorum at the end of inner step `step` and, if an
	// outer step is due there, runs it until a quorum commits it.
	outer := func() error {
		for {
			mgr.SetStep(step)
			before := mgr.Step()
			if err := mgr.StartStep(ctx); err != nil {
				return err
			}
			q := mgr.Quorum()
			if rejoin != "" && (q.Index(rejoin) < 0 || slices.Contains(q.Recover, rejoin)) {
				left = true // gone, or restarted in place: back once it healed
			}
			if before < 0 {
				fmt.Printf("healed step=%d members=%d pid=%d sha=%s\n", mgr.Step(), mgr.Size(), os.Getpid(), paramSHA(params))
			}
			if slices.Contains(q.Recover, id) {
				silent = true
			}
			if err := m.SetGroup(mgr.Group()); err != nil {
				return err
			}
			if !m.Due() {
				silent = false
				return nil
			}
			if step == killAt {
				syscall.Kill(os.Getpid(), syscall.SIGKILL) // posted to the quorum, before the reduction
			}
			if err := m.Reduce(ctx, false, !silent); err != nil {
				mgr.Fail(err)
			}
			ok, err := mgr.ShouldCommit(ctx)
			if err != nil {
				return err
			}
			if !ok {
				m.Discard()
				fmt.Printf("discarded step=%d\n", step)
				continue
			}
			m.Apply()
			silent = false
			fmt.Printf("outer step=%d members=%d pid=%d sha=%s\n", step, mgr.Size(), os.Getpid(), paramSHA(params))
			return nil
		}
	}
	if err := outer(); err != nil {
		return err
	}
	n := globalSize * 8
	x := tensor.Randn(tensor.NewRNG(99), n, 8).Data()
	sampler := Sampler{N: n, GlobalBatch: globalSize, Shuffle: true, Seed: 7}
	done := func() bool {
		q := mgr.Quorum()
		return step >= steps && step%int64(h) == 0 && (rejoin == "" || q.Index(rejoin) >= 0 && (left || rejoin == id))
	}
	for !done() {
		if step >= bound {
			return fmt.Errorf("replica %s: %d inner steps and replica %s is not back in the quorum (seen gone: %v)", id, step, rejoin, left)
		}
		idx, err := sampler.Indices(step, mgr.Rank(), mgr.Size())
		if err != nil {
			return err
		}
		bx := make([]float32, 0, len(idx)*8)
		by := make([]int, len(idx))
		for i, j := range idx {
			bx = append(bx, x[j*8:(j+1)*8]...)
			by[i] = j % 4
		}
		opt.ZeroGrad()
		if err := nn.CrossEntropy(module.Forward(tensor.New(bx, len(idx), 8)), by).Backward(); err != nil {
			return err
		}
		opt.Step()
		step++
		if m.Advance() {
			if err := outer(); err != nil {
				return err
			}
		}
	}
	s := mgr.Stats()
	fmt.Printf("final step=%d members=%d pid=%d sha=%s survived=%d lost=%d heals=%d\n",
		step, mgr.Size(), os.Getpid(), paramSHA(params), s.FailuresSurvived, s.StepsLost, s.Heals)
	return nil
}

// TestOuterStepSurvivesAndHeals: three DiLoCo replica processes with
// the quorum at the outer step (every 4 inner steps). r1 dies in the
// outer step at inner step 8, after posting to the quorum and before its
// reduction: the survivors' reduction fails, they drop that outer step
// and redo it without r1, and go on with the same PIDs. A replacement
// joins at a later outer step, heals there from a peer, and its weights
// equal the survivors' after that outer step, and at the end.
func TestOuterStepSurvivesAndHeals(t *testing.T) {
	const live = 3 * time.Second
	addr := serveStore(t)
	env := []string{envSteps + "=40", envOuterH + "=4", envRejoin + "=r1", envLive + "=" + live.String()}
	start := func(id string, rank int, extra ...string) *testproc.Proc {
		cmd := testproc.Command(context.Background(), t, "ft-outer", "-test.run=^$")
		cmd.Env = append(cmd.Env, envStore+"="+addr, envID+"="+id)
		cmd.Env = append(append(cmd.Env, env...), extra...)
		return testproc.Watch(t, cmd, rank)
	}
	procs := []*testproc.Proc{start("r0", 0), start("r1", 1, envOuterKillAt+"=8"), start("r2", 2)}
	select {
	case <-procs[1].Done():
	case <-time.After(90 * time.Second):
		t.Fatalf("r1 did not die at its outer step 8; output:\n%s", procs[1].Output())
	}
	if !strings.Contains(fmt.Sprint(procs[1].Err()), "killed") {
		t.Fatalf("r1 exited with %v, want killed by SIGKILL:\n%s", procs[1].Err(), procs[1].Output())
	}
	survivors := []*testproc.Proc{procs[0], procs[2]}
	for _, p := range survivors {
		discard := firstWith(t, p, "discarded ", time.Time{}, "step", "8")
		l := firstWith(t, p, "outer ", time.Time{}, "members", "2")
		if field(l.Text, "step") != "8" || l.At.Before(discard.At) {
			t.Fatalf("replica %d: %q, then %q; want outer step 8 discarded, then committed by 2 members", p.Rank, discard.Text, l.Text)
		}
		if pid := field(l.Text, "pid"); pid != strconv.Itoa(p.Cmd.Process.Pid) {
			t.Fatalf("replica %d reports pid %s after the failure, started as %d", p.Rank, pid, p.Cmd.Process.Pid)
		}
	}
	joined := time.Now()
	repl := start("r1", 1, envStep+"=-1")
	healed, ok := repl.WaitLine("healed ", 90*time.Second)
	if !ok {
		t.Fatalf("the replacement never healed; output:\n%s", repl.Output())
	}
	step := field(healed.Text, "step")
	if n, _ := strconv.Atoi(step); n%4 != 0 || field(healed.Text, "members") != "3" {
		t.Fatalf("the replacement healed at %q: want an outer step (a multiple of 4) in a quorum of 3", healed.Text)
	}
	mine := firstWith(t, repl, "outer ", time.Time{}, "step", step)
	for _, p := range survivors {
		l := firstWith(t, p, "outer ", joined, "step", step)
		if field(l.Text, "members") != "3" || field(l.Text, "sha") != field(mine.Text, "sha") {
			t.Fatalf("outer step %s: replica %d %q, the replacement %q; want the same weights in a quorum of 3", step, p.Rank, l.Text, mine.Text)
		}
	}
	t.Logf("the replacement healed at outer step %s and equals its peers after it", step)
	var final []string
	for _, p := range append(survivors, repl) {
		waitExit(t, p)
		if p.Err() != nil {
			t.Fatalf("replica %d failed: %v\n%s", p.Rank, p.Err(), p.Output())
		}
		l, ok := p.WaitLine("final ", 0)
		if !ok {
			t.Fatalf("replica %d printed no final line:\n%s", p.Rank, p.Output())
		}
		final = append(final, l.Text)
	}
	for _, f := range final {
		if field(f, "sha") != field(final[0], "sha") || field(f, "step") != field(final[0], "step") || field(f, "members") != "3" {
			t.Fatalf("final states differ, or not in a quorum of 3:\n%s", strings.Join(final, "\n"))
		}
	}
	for _, f := range final[:2] {
		if field(f, "survived") != "1" || field(f, "lost") != "1" {
			t.Errorf("a survivor's stats %q: want one failure survived and one outer step lost", f)
		}
	}
}
