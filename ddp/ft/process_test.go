package ft

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/distributed/store"
	"github.com/gotrain/gotrain/internal/testproc"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// The replica worker's environment.
const (
	envStore    = "FT_TEST_STORE"       // host:port of the store the test serves
	envID       = "FT_TEST_ID"          // replica ID
	envStep     = "FT_TEST_STEP"        // Config.Step: 0, or -1 to heal
	envSteps    = "FT_TEST_STEPS"       // train until this many steps are committed
	envHidden   = "FT_TEST_HIDDEN"      // hidden width (another one makes another model)
	envMin      = "FT_TEST_MIN"         // MinReplicas
	envRejoin   = "FT_TEST_REJOIN"      // train on past FT_TEST_STEPS until this replica is back in the quorum
	envBound    = "FT_TEST_BOUND"       // the step at which waiting for FT_TEST_REJOIN fails
	envLive     = "FT_TEST_LIVENESS"    // liveness bound
	envKillAt   = "FT_TEST_KILL_AT"     // SIGKILL itself in the middle of this step
	envReplica  = "FT_TEST_REPLICAS"    // Config.Replicas
	envDieServ  = "FT_TEST_DIE_SERVING" // SIGKILL itself when asked to serve a heal
	envKillVote = "FT_TEST_KILL_VOTE"   // SIGKILL itself in this step, after its allreduce, before its vote
	testToken   = "ft-test-token"
	globalSize  = 6 // global batch: divides evenly over 1, 2 or 3 replicas
)

func TestMain(m *testing.M) {
	testproc.Dispatch(testproc.Workers{
		"ft-replica": func() int { return testproc.ExitCode(replicaWorker(context.Background())) },
		"ft-outer":   func() int { return testproc.ExitCode(outerWorker(context.Background())) },
	})
	os.Exit(m.Run())
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// replicaWorker trains a tiny MLP under a Manager and prints a line per
// committed step: "state step=S members=K pid=P sha=H", H the sha256 of
// its parameters; "healed step=S ..." after healing; "final ..." at the
// end.
func replicaWorker(ctx context.Context) error {
	id := os.Getenv(envID)
	hidden := envInt(envHidden, 16)
	steps := int64(envInt(envSteps, 20))
	rejoin, bound := os.Getenv(envRejoin), int64(envInt(envBound, 2000))
	live, err := time.ParseDuration(os.Getenv(envLive))
	if err != nil {
		return fmt.Errorf("%s: %w", envLive, err)
	}
	model := nn.Sequential(nn.Linear(8, hidden), nn.ReLU(), nn.Linear(hidden, 4))
	nn.ResetParameters(model, tensor.NewRNG(1))
	params := nn.Parameters(model)
	opt := optim.NewSGD(params, 0.05)
	shapes := make([][]int, len(params))
	for i, p := range params {
		shapes[i] = p.Shape()
	}
	st, err := store.Dial(ctx, os.Getenv(envStore), []byte(testToken))
	if err != nil {
		return err
	}
	defer st.Close()
	log := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelInfo}))
	mgr, err := New(ctx, Config{
		ReplicaID: id, Store: st, StoreAddr: os.Getenv(envStore),
		Group:    distributed.Config{Token: testToken, Timeout: 30 * time.Second, JobID: "fttest", Logger: log},
		Replicas: envInt(envReplica, 3), MinReplicas: envInt(envMin, 1), Liveness: live,
		QuorumTimeout: 3 * live,
		ModelHash:     ShapeHash(shapes),
		Step:          int64(envInt(envStep, 0)),
		Snapshot: func() ([]byte, error) {
			if os.Getenv(envDieServ) == "1" {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
			return paramBytes(params), nil
		},
		Load:   func(b []byte) error { return loadParams(params, b) },
		Logger: log,
	})
	if err != nil {
		return err
	}
	defer mgr.Close()
	n := globalSize * 8
	x := tensor.Randn(tensor.NewRNG(99), n, 8).Data()
	sampler := Sampler{N: n, GlobalBatch: globalSize, Shuffle: true, Seed: 7}
	// With FT_TEST_REJOIN the replicas train on until the quorum of a
	// step from FT_TEST_STEPS on holds that replica after this one has
	// seen it gone or healing (or is it): every member of that quorum
	// stops at the same step.
	left := false
	done := func() bool {
		if mgr.Step() < steps {
			return false
		}
		if rejoin == "" {
			return true
		}
		q := mgr.Quorum()
		in := q.Index(rejoin) >= 0
		return in && (left || rejoin == id)
	}
	for !done() {
		if mgr.Step() >= bound {
			return fmt.Errorf("replica %s: %d steps committed and replica %s is not back in the quorum (seen gone: %v)", id, mgr.Step(), rejoin, left)
		}
		before := mgr.Step()
		if err := mgr.StartStep(ctx); err != nil {
			return err
		}
		if q := mgr.Quorum(); rejoin != "" && (q.Index(rejoin) < 0 || slices.Contains(q.Recover, rejoin)) {
			left = true // gone, or restarted in place: back once it healed
		}
		if before < 0 {
			fmt.Printf("healed step=%d members=%d pid=%d sha=%s\n", mgr.Step(), mgr.Size(), os.Getpid(), paramSHA(params))
		}
		if int64(envInt(envKillAt, -1)) == mgr.Step() {
			// In flight: posted to the quorum, before the allreduce.
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		idx, err := sampler.Indices(mgr.Step(), mgr.Rank(), mgr.Size())
		if err != nil {
			return err
		}
		bx := make([]float32, 0, len(idx)*8)
		by := make([]int, len(idx))
		for i, j := range idx {
			bx = append(bx, x[j*8:(j+1)*8]...)
			by[i] = j % 4
		}
		if err := nn.CrossEntropy(model.Forward(tensor.New(bx, len(idx), 8)), by).Backward(); err != nil {
			return err
		}
		_ = mgr.AllReduceGrads(ctx, params) // a failure discards the step below
		if int64(envInt(envKillVote, -1)) == mgr.Step() {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		ok, err := mgr.ShouldCommit(ctx)
		if err != nil {
			return err
		}
		if ok {
			opt.Step()
			fmt.Printf("state step=%d members=%d pid=%d sha=%s\n", mgr.Step(), mgr.Size(), os.Getpid(), paramSHA(params))
		} else {
			fmt.Printf("discarded step=%d\n", mgr.Step())
		}
		opt.ZeroGrad()
	}
	s := mgr.Stats()
	fmt.Printf("final step=%d members=%d pid=%d sha=%s survived=%d lost=%d heals=%d quorums=%d\n",
		mgr.Step(), mgr.Size(), os.Getpid(), paramSHA(params), s.FailuresSurvived, s.StepsLost, s.Heals, len(s.History))
	return nil
}

func paramBytes(params []*tensor.Tensor) []byte {
	var b []byte
	for _, p := range params {
		for _, v := range p.Data() {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		}
	}
	return b
}

func loadParams(params []*tensor.Tensor, b []byte) error {
	n := 0
	for _, p := range params {
		n += 4 * len(p.Data())
	}
	if len(b) != n {
		return errors.New("state of " + strconv.Itoa(len(b)) + " bytes, want " + strconv.Itoa(n))
	}
	for _, p := range params {
		d := p.Data()
		for i := range d {
			d[i] = math.Float32frombits(binary.LittleEndian.Uint32(b))
			b = b[4:]
		}
	}
	return nil
}

func paramSHA(params []*tensor.Tensor) string {
	s := sha256.Sum256(paramBytes(params))
	return hex.EncodeToString(s[:8])
}

// field returns the value of key=value in a worker's line.
func field(line, key string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}

// serveStore serves the coordination store, as a launcher's node agent
// would, and returns its address.
func serveStore(t *testing.T) string {
	t.Helper()
	addr, _ := serveStoreClient(t)
	return addr
}

// serveStoreClient is serveStore with a client of the store.
func serveStoreClient(t *testing.T) (string, store.Store) {
	t.Helper()
	srv, err := store.Listen("127.0.0.1:0", []byte(testToken))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(srv.Addr().(*net.TCPAddr).Port))
	c, err := store.Dial(context.Background(), addr, []byte(testToken))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return addr, c
}

// startReplica starts one replica process.
func startReplica(t *testing.T, addr, id string, rank int, env ...string) *testproc.Proc {
	t.Helper()
	cmd := testproc.Command(context.Background(), t, "ft-replica", "-test.run=^$")
	cmd.Env = append(cmd.Env, envStore+"="+addr, envID+"="+id)
	cmd.Env = append(cmd.Env, env...)
	return testproc.Watch(t, cmd, rank)
}

// linesAfter returns p's lines with prefix that arrived after t0.
func linesAfter(p *testproc.Proc, prefix string, t0 time.Time) []testproc.Line {
	var out []testproc.Line
	for _, l := range p.Lines() {
		if strings.HasPrefix(l.Text, prefix) && l.At.After(t0) {
			out = append(out, l)
		}
	}
	return out
}

// firstWith waits for p's first line with prefix after t0 that has
// key=value.
func firstWith(t *testing.T, p *testproc.Proc, prefix string, t0 time.Time, key, value string) testproc.Line {
	t.Helper()
	var found testproc.Line
	ok := testproc.Poll(90*time.Second, func() bool {
		for _, l := range linesAfter(p, prefix, t0) {
			if field(l.Text, key) == value {
				found = l
				return true
			}
		}
		return false
	})
	if !ok {
		t.Fatalf("replica %d: no %q line with %s=%s after %v; output:\n%s", p.Rank, prefix, key, value, t0.Format(time.StampMilli), p.Output())
	}
	return found
}

func waitExit(t *testing.T, p *testproc.Proc) {
	t.Helper()
	select {
	case <-p.Done():
	case <-time.After(120 * time.Second):
		t.Fatalf("replica %d still running; output:\n%s", p.Rank, p.Output())
	}
}

// TestSurvivorsContinueAndReplacementHeals trains three replica
// processes, SIGKILLs one mid-training, checks that the other two go on
// without restarting, starts a replacement that heals from a peer, and
// checks that all end with identical weights.
func TestSurvivorsContinueAndReplacementHeals(t *testing.T) {
	const live = 3 * time.Second
	addr, st := serveStoreClient(t)
	env := []string{envSteps + "=70", envRejoin + "=r1", envLive + "=" + live.String()}
	ids := []string{"r0", "r1", "r2"}
	procs := make([]*testproc.Proc, 3)
	for i, id := range ids {
		e := env
		if id == "r1" {
			e = append(e[:len(e):len(e)], envKillAt+"=5")
		}
		procs[i] = startReplica(t, addr, id, i, e...)
	}
	pids := []int{procs[0].Cmd.Process.Pid, procs[2].Cmd.Process.Pid}
	select {
	case <-procs[1].Done(): // r1 SIGKILLs itself in the middle of step 5
	case <-time.After(90 * time.Second):
		t.Fatalf("r1 did not die at step 5; output:\n%s", procs[1].Output())
	}
	killed := time.Now()
	if !strings.Contains(fmt.Sprint(procs[1].Err()), "killed") {
		t.Fatalf("r1 exited with %v, want killed by SIGKILL", procs[1].Err())
	}
	survivors := []*testproc.Proc{procs[0], procs[2]}
	for i, p := range survivors {
		// The in-flight step is discarded, then redone by the two.
		discard := firstWith(t, p, "discarded ", time.Time{}, "step", "5")
		l := firstWith(t, p, "state ", time.Time{}, "members", "2")
		if field(l.Text, "step") != "6" || l.At.Before(discard.At) {
			t.Fatalf("replica %d: %q at %v, then %q at %v; want step 5 discarded, then step 6 committed by 2 members",
				p.Rank, discard.Text, discard.At, l.Text, l.At)
		}
		t.Logf("replica %d committed %s %v after r1 was killed (liveness bound %v)", p.Rank, field(l.Text, "step"), l.At.Sub(killed).Round(time.Millisecond), live)
		if pid := field(l.Text, "pid"); pid != strconv.Itoa(pids[i]) {
			t.Fatalf("replica %d reports pid %s after the failure, started as %d", p.Rank, pid, pids[i])
		}
		select {
		case <-p.Done():
			t.Fatalf("replica %d exited after r1's death: %v\n%s", p.Rank, p.Err(), p.Output())
		default:
		}
	}
	joined := time.Now()
	repl := startReplica(t, addr, "r1", 1, append(env, envStep+"=-1")...)
	healed, ok := repl.WaitLine("healed ", 90*time.Second)
	if !ok {
		t.Fatalf("the replacement never healed; output:\n%s", repl.Output())
	}
	step := field(healed.Text, "step")
	if field(healed.Text, "members") != "3" {
		t.Fatalf("the replacement healed into a quorum of %s members: %s", field(healed.Text, "members"), healed.Text)
	}
	for _, p := range survivors {
		l := firstWith(t, p, "state ", killed, "step", step)
		if got, want := field(healed.Text, "sha"), field(l.Text, "sha"); got != want {
			t.Fatalf("the replacement's weights at step %s hash to %s; replica %d's to %s", step, got, p.Rank, want)
		}
		after := firstWith(t, p, "state ", joined, "members", "3")
		t.Logf("replica %d: first step with 3 members committed %v after the replacement started", p.Rank, after.At.Sub(joined).Round(time.Millisecond))
	}
	for _, l := range repl.Lines() {
		if strings.Contains(l.Text, "ft: heal received") {
			t.Logf("heal transfer (the other members' pause at most): %s", l.Text)
		}
	}
	all := append(survivors, repl)
	var final []string
	for _, p := range all {
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
	if n, _ := strconv.Atoi(field(final[0], "step")); n < 70 {
		t.Fatalf("final step %d, want at least 70:\n%s", n, strings.Join(final, "\n"))
	}
	for _, f := range final[:2] {
		if field(f, "survived") != "1" || field(f, "lost") != "1" {
			t.Errorf("a survivor's stats %q: want one failure survived and one step lost", f)
		}
	}
	if field(final[2], "heals") != "1" {
		t.Errorf("the replacement's stats %q: want one heal", final[2])
	}
	// Old rounds' keys are collected; the last round's stay.
	ft := store.Prefix(st, "gotrain-ft/fttest/")
	last, err := peekInt(context.Background(), ft, "latest")
	if err != nil || last < 70 {
		t.Fatalf("latest round = %d, %v; want at least 70", last, err)
	}
	for _, c := range []struct {
		round int64
		want  bool
	}{{1, false}, {last - 2, false}, {last, true}} {
		v, err := peek(context.Background(), ft, fmt.Sprintf("r/%d/q", c.round))
		if err != nil || (v != nil) != c.want {
			t.Errorf("round %d of %d: quorum key present = %v (%v); want %v", c.round, last, v != nil, err, c.want)
		}
	}
}

// TestHealRetriesFromAnotherPeer: the member serving a heal dies during
// the transfer; the replacement heals from the other survivor instead.
func TestHealRetriesFromAnotherPeer(t *testing.T) {
	addr := serveStore(t)
	env := []string{envSteps + "=40", envRejoin + "=r1", envLive + "=2s"}
	r0 := startReplica(t, addr, "r0", 0, append(env, envDieServ+"=1")...)
	r1 := startReplica(t, addr, "r1", 1, append(env, envKillAt+"=3")...)
	r2 := startReplica(t, addr, "r2", 2, env...)
	waitExit(t, r1)
	firstWith(t, r2, "state ", time.Time{}, "members", "2")
	repl := startReplica(t, addr, "r1", 1, append(env, envStep+"=-1")...)
	healed, ok := repl.WaitLine("healed ", 90*time.Second)
	if !ok {
		t.Fatalf("the replacement never healed; output:\n%s", repl.Output())
	}
	waitExit(t, r0)
	if !strings.Contains(fmt.Sprint(r0.Err()), "killed") {
		t.Fatalf("r0 (the first source) exited with %v; want killed while serving", r0.Err())
	}
	if field(healed.Text, "members") != "2" {
		t.Fatalf("healed line %q: want a quorum of r1 and r2", healed.Text)
	}
	peer := firstWith(t, r2, "state ", time.Time{}, "step", field(healed.Text, "step"))
	if field(peer.Text, "sha") != field(healed.Text, "sha") {
		t.Fatalf("the replacement healed to %q; r2 is at %q", healed.Text, peer.Text)
	}
	var from string
	for _, l := range repl.Lines() {
		if strings.Contains(l.Text, "ft: heal received") {
			from = field(l.Text, "source")
		}
	}
	if from != "r2" {
		t.Fatalf("the replacement healed from %q; want r2:\n%s", from, repl.Output())
	}
	var final []string
	for _, p := range []*testproc.Proc{r2, repl} {
		waitExit(t, p)
		l, ok := p.WaitLine("final ", 0)
		if p.Err() != nil || !ok {
			t.Fatalf("replica %d: %v\n%s", p.Rank, p.Err(), p.Output())
		}
		final = append(final, field(l.Text, "sha"))
	}
	if final[0] != final[1] {
		t.Fatalf("final weights differ: r2 %s, r1 %s", final[0], final[1])
	}
}

// TestBelowMinReplicasFailsWithRootCause: with MinReplicas 2, the
// survivor of two replicas waits for the quorum timeout, then fails
// naming the minimum and the failure that caused it.
func TestBelowMinReplicasFailsWithRootCause(t *testing.T) {
	addr := serveStore(t)
	env := []string{envSteps + "=1000", envLive + "=1s", envMin + "=2", envReplica + "=2"}
	r0 := startReplica(t, addr, "r0", 0, env...)
	r1 := startReplica(t, addr, "r1", 1, append(env, envKillAt+"=3")...)
	waitExit(t, r1)
	waitExit(t, r0)
	if r0.Err() == nil {
		t.Fatalf("r0 ended well alone under MinReplicas 2:\n%s", r0.Output())
	}
	out := r0.Output()
	for _, want := range []string{"fewer than the minimum of 2", "the last failure", "allreduce", "peer lost"} {
		if !strings.Contains(out, want) {
			t.Fatalf("r0's failure does not say %q:\n%s", want, out)
		}
	}
	t.Logf("r0: %s", lastLine(out))
	if !strings.Contains(out, "quorum round waiting") {
		t.Fatalf("r0 did not log its wait below the minimum:\n%s", out)
	}
}

// TestReplicaWithAnotherModelIsRefused: a replica whose model has
// another shape is refused with one line naming it; the others train on.
// r0 and r1 train until the test ends (its cleanup kills them), and r9
// starts once both have committed a step, so that however late a loaded
// machine starts r9's process it meets them training.
func TestReplicaWithAnotherModelIsRefused(t *testing.T) {
	addr := serveStore(t)
	env := []string{envSteps + "=1000000000", envLive + "=2s", envReplica + "=2"}
	r0 := startReplica(t, addr, "r0", 0, env...)
	r1 := startReplica(t, addr, "r1", 1, env...)
	for _, p := range []*testproc.Proc{r0, r1} {
		if _, ok := p.WaitLine("state ", 90*time.Second); !ok {
			t.Fatalf("replica %d committed no step; output:\n%s", p.Rank, p.Output())
		}
	}
	odd := startReplica(t, addr, "r9", 2, append(env, envHidden+"=32")...)
	waitExit(t, odd)
	refused := time.Now()
	if odd.Err() == nil {
		t.Fatalf("r9 with another model shape was not refused:\n%s", odd.Output())
	}
	line := ""
	for _, l := range odd.Lines() {
		if strings.Contains(l.Text, "refused") {
			line = l.Text
		}
	}
	if !strings.Contains(line, "replica r9 refused") || !strings.Contains(line, "model hash") {
		t.Fatalf("r9's refusal does not name it and its model hash:\n%s", odd.Output())
	}
	t.Logf("r9: %s", line)
	for _, p := range []*testproc.Proc{r0, r1} {
		if !testproc.Poll(90*time.Second, func() bool { return len(linesAfter(p, "state ", refused)) > 0 }) {
			t.Fatalf("replica %d committed no step after r9 was refused; output:\n%s", p.Rank, p.Output())
		}
		select {
		case <-p.Done():
			t.Fatalf("replica %d exited beside a refused one: %v\n%s", p.Rank, p.Err(), p.Output())
		default:
		}
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestRestartedBeforeItsVote: r1 dies after its step's allreduce, before
// voting, and is restarted at once with the same replica ID, well within
// the liveness bound (its heartbeat never stops): the survivors do not
// wait for its vote, since it has posted to the next round; they discard
// the step, heal the new r1 and all end with the same weights.
func TestRestartedBeforeItsVote(t *testing.T) {
	addr := serveStore(t)
	// A liveness bound far longer than the test: only the next round's
	// post can tell the survivors that r1 will not vote.
	env := []string{envSteps + "=30", envRejoin + "=r1", envLive + "=5m"}
	r0 := startReplica(t, addr, "r0", 0, env...)
	r1 := startReplica(t, addr, "r1", 1, append(env, envKillVote+"=5")...)
	r2 := startReplica(t, addr, "r2", 2, env...)
	waitExit(t, r1)
	if !strings.Contains(fmt.Sprint(r1.Err()), "killed") {
		t.Fatalf("r1 exited with %v, want killed by SIGKILL:\n%s", r1.Err(), r1.Output())
	}
	repl := startReplica(t, addr, "r1", 1, append(env, envStep+"=-1")...)
	healed, ok := repl.WaitLine("healed ", 90*time.Second)
	if !ok {
		t.Fatalf("the replacement never healed; survivors:\n%s\n%s\nreplacement:\n%s", r0.Output(), r2.Output(), repl.Output())
	}
	for _, p := range []*testproc.Proc{r0, r2} {
		firstWith(t, p, "discarded ", time.Time{}, "step", "5")
		l := firstWith(t, p, "state ", time.Time{}, "step", field(healed.Text, "step"))
		if l.Text == "" || field(l.Text, "sha") != field(healed.Text, "sha") {
			t.Fatalf("replica %d at step %s: %q; the replacement healed to %q", p.Rank, field(healed.Text, "step"), l.Text, healed.Text)
		}
	}
	var final []string
	for _, p := range []*testproc.Proc{r0, r2, repl} {
		waitExit(t, p)
		l, ok := p.WaitLine("final ", 0)
		if p.Err() != nil || !ok {
			t.Fatalf("replica %d: %v\n%s", p.Rank, p.Err(), p.Output())
		}
		final = append(final, l.Text)
	}
	for _, f := range final {
		if field(f, "sha") != field(final[0], "sha") || field(f, "members") != "3" {
			t.Fatalf("final states differ, or not in a quorum of 3:\n%s", strings.Join(final, "\n"))
		}
	}
}
