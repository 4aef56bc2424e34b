package ddp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// joinCase is one case of testdata/join_fixtures.json, written by
// testdata/join_gen.py with PyTorch's DistributedDataParallel.join().
type joinCase struct {
	Name            string      `json:"name"`
	World           int         `json:"world"`
	Counts          []int       `json:"counts"`
	DivideByInitial bool        `json:"divide_by_initial"`
	Accum           int         `json:"accum"`
	Initial         [][]float32 `json:"initial"`
	X               [][]float32 `json:"x"`
	Y               [][]int     `json:"y"`
	Losses          [][]float64 `json:"losses"`
	Final           [][]float32 `json:"final"`
}

type joinFixtures struct {
	Batch int        `json:"batch"`
	LR    float64    `json:"lr"`
	Cases []joinCase `json:"cases"`
}

func readJoinFixtures() (joinFixtures, error) {
	var f joinFixtures
	b, err := os.ReadFile(filepath.Join("testdata", "join_fixtures.json"))
	if err != nil {
		return f, err
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return f, fmt.Errorf("join_fixtures.json: %w", err)
	}
	return f, nil
}

func loadJoinFixtures(t testing.TB) joinFixtures {
	t.Helper()
	f, err := readJoinFixtures()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (f joinFixtures) lookup(name string) (joinCase, error) {
	for _, c := range f.Cases {
		if c.Name == name {
			return c, nil
		}
	}
	return joinCase{}, fmt.Errorf("join_fixtures.json has no case %q", name)
}

func (f joinFixtures) find(t testing.TB, name string) joinCase {
	t.Helper()
	c, err := f.lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// joinModel is the fixture's Linear(4,3) → ReLU → Linear(3,2) with its
// initial weights.
func joinModel(c joinCase) nn.Module {
	m := nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
	for i, p := range nn.Parameters(m) {
		copy(p.Data(), c.Initial[i])
	}
	return m
}

// joinRun is one rank's result of a fixture case.
type joinRun struct {
	Losses []float64   `json:"losses"`
	Final  [][]float32 `json:"final"`
	Steps  int         `json:"steps"` // optimizer steps taken
}

// errJoinLoop is the failure trainJoinCase's loop returns at step failAt.
var errJoinLoop = errors.New("loop failed on purpose")

// trainJoinCase trains rank's share of case c under Join over g, as the
// PyTorch script does; counts, if not nil, replaces the case's batch
// counts (a prefix of the rank's data). If failAt >= 0, the loop returns
// errJoinLoop at that step instead.
func trainJoinCase(ctx context.Context, c joinCase, batch int, lr float64, rank int, g Group, counts []int, failAt int, opts []Option, jopts []JoinOption) (joinRun, error) {
	if counts == nil {
		counts = c.Counts
	}
	m := joinModel(c)
	dm, err := New(ctx, m, g, opts...)
	if err != nil {
		return joinRun{}, err
	}
	defer dm.Close()
	opt := optim.NewSGD(dm.Parameters(), lr)
	accum := max(c.Accum, 1)
	var run joinRun
	err = dm.Join(ctx, func(ctx context.Context) error {
		for s := 0; s < counts[rank]; s++ {
			if s == failAt {
				return fmt.Errorf("rank %d step %d: %w", rank, s, errJoinLoop)
			}
			opt.ZeroGrad()
			for k := 0; k < accum; k++ {
				i := s*accum + k
				x := tensor.New(append([]float32(nil), c.X[rank][i*batch*4:(i+1)*batch*4]...), batch, 4)
				y := c.Y[rank][i*batch : (i+1)*batch]
				step := func() error {
					loss := nn.CrossEntropy(dm.Forward(x), y)
					run.Losses = append(run.Losses, float64(loss.Item()))
					if err := loss.Backward(); err != nil {
						return fmt.Errorf("rank %d step %d: %w", rank, s, err)
					}
					return nil
				}
				if k < accum-1 {
					err = dm.NoSync(step)
				} else {
					err = step()
				}
				if err != nil {
					return err
				}
			}
			opt.Step()
			run.Steps++
		}
		return nil
	}, jopts...)
	run.Final = paramsOf(m)
	return run, err
}

// runJoinCase runs every rank of c in this process.
func runJoinCase(t *testing.T, f joinFixtures, c joinCase, counts []int, opts []Option, jopts ...JoinOption) ([]joinRun, []error) {
	t.Helper()
	runs := make([]joinRun, c.World)
	done := make(chan []error, 1)
	go func() {
		done <- runRanks(c.World, func(rank int, g Group) error {
			var err error
			runs[rank], err = trainJoinCase(context.Background(), c, f.Batch, f.LR, rank, g, counts, -1, opts, jopts)
			return err
		})
	}()
	select {
	case errs := <-done:
		return runs, errs
	case <-time.After(2 * time.Minute): // a hang is the defect under test; fail instead of waiting for go test's timeout
		t.Fatalf("%s: ranks did not finish: a rank is waiting for a collective no other rank issues", c.Name)
		return nil, nil
	}
}

// checkJoinParity compares every rank's losses and final weights with
// PyTorch's, and the replicas with each other bitwise.
func checkJoinParity(t *testing.T, c joinCase, runs []joinRun, tol float64) {
	t.Helper()
	for r, run := range runs {
		if len(run.Losses) != len(c.Losses[r]) {
			t.Fatalf("%s: rank %d ran %d passes, PyTorch %d", c.Name, r, len(run.Losses), len(c.Losses[r]))
		}
		for i, l := range run.Losses {
			if d := math.Abs(l - c.Losses[r][i]); d > tol*math.Max(1, math.Abs(c.Losses[r][i])) {
				t.Errorf("%s: rank %d pass %d: loss %.7f, PyTorch %.7f", c.Name, r, i, l, c.Losses[r][i])
			}
		}
		if d := maxRelDiffAbs(run.Final, c.Final); d > tol {
			t.Errorf("%s: rank %d final weights differ from PyTorch's by %g (> %g)\n got %v\nwant %v", c.Name, r, d, tol, run.Final, c.Final)
		}
	}
	for r := 1; r < len(runs); r++ {
		for i := range runs[r].Final {
			for k := range runs[r].Final[i] {
				if math.Float32bits(runs[r].Final[i][k]) != math.Float32bits(runs[0].Final[i][k]) {
					t.Fatalf("%s: rank %d parameter %d[%d] = %v, rank 0 has %v: replicas differ after Join",
						c.Name, r, i, k, runs[r].Final[i][k], runs[0].Final[i][k])
				}
			}
		}
	}
}

func TestJoinMatchesPyTorch(t *testing.T) {
	f := loadJoinFixtures(t)
	for _, c := range f.Cases {
		for _, v := range []struct {
			name string
			opts []Option
		}{
			{"default", nil},
			// Several buckets, rebuilt after the first synchronised pass,
			// with rank 1 possibly joined before it.
			{"tiny-buckets-view", []Option{BucketCapMB(16.0 / (1 << 20)), GradientAsBucketView(true)}},
			{"inline-tiny-buckets", []Option{BucketCapMB(16.0 / (1 << 20)), OverlapComm(false)}},
		} {
			t.Run(c.Name+"/"+v.name, func(t *testing.T) {
				runs, errs := runJoinCase(t, f, c, nil, v.opts, DivideByInitialWorldSize(c.DivideByInitial))
				for r, err := range errs {
					if err != nil {
						t.Fatalf("rank %d: %v", r, err)
					}
				}
				checkJoinParity(t, c, runs, 1e-5)
			})
		}
	}
}

// TestJoinDivisorDiffers guards the fixture itself: the two divisors give
// different training, so parity with each tests the option.
func TestJoinDivisorDiffers(t *testing.T) {
	f := loadJoinFixtures(t)
	a, b := f.find(t, "w3_div_initial"), f.find(t, "w3_div_active")
	if d := maxRelDiffAbs(a.Final, b.Final); d < 1e-4 {
		t.Fatalf("divide_by_initial_world_size true and false end within %g of each other", d)
	}
}

func TestJoinEvenInputsEqualPlainDDP(t *testing.T) {
	f := loadJoinFixtures(t)
	c := f.find(t, "w3_div_active")
	even := []int{3, 3, 3}
	runs, errs := runJoinCase(t, f, c, even, []Option{BucketCapMB(16.0 / (1 << 20))}, DivideByInitialWorldSize(false))
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	plain := make([][][]float32, c.World)
	errs = runRanks(c.World, func(rank int, g Group) error {
		m := joinModel(c)
		dm, err := New(context.Background(), m, g, BucketCapMB(16.0/(1<<20)))
		if err != nil {
			return err
		}
		defer dm.Close()
		opt := optim.NewSGD(dm.Parameters(), f.LR)
		for i := 0; i < even[rank]; i++ {
			opt.ZeroGrad()
			x := tensor.New(append([]float32(nil), c.X[rank][i*f.Batch*4:(i+1)*f.Batch*4]...), f.Batch, 4)
			if err := nn.CrossEntropy(dm.Forward(x), c.Y[rank][i*f.Batch:(i+1)*f.Batch]).Backward(); err != nil {
				return err
			}
			opt.Step()
		}
		plain[rank] = paramsOf(m)
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("plain DDP rank %d: %v", r, err)
		}
	}
	for r := range runs {
		for i := range plain[r] {
			for k := range plain[r][i] {
				if math.Float32bits(plain[r][i][k]) != math.Float32bits(runs[r].Final[i][k]) {
					t.Fatalf("rank %d parameter %d[%d]: %v under Join, %v without: even inputs must train identically",
						r, i, k, runs[r].Final[i][k], plain[r][i][k])
				}
			}
		}
	}
}

func TestJoinThrowOnEarlyTermination(t *testing.T) {
	f := loadJoinFixtures(t)
	c := f.find(t, "w3_div_initial") // counts 5, 3, 4
	runs, errs := runJoinCase(t, f, c, nil, nil, ThrowOnEarlyTermination(true))
	want := "ddp: join: uneven inputs: rank(s) [1] ran out of inputs at join round 4 while rank(s) [0 2] still had some (ThrowOnEarlyTermination)"
	for r, err := range errs {
		if !errors.Is(err, ErrUnevenInputs) {
			t.Fatalf("rank %d: got %v, want ErrUnevenInputs", r, err)
		}
		if !strings.HasSuffix(err.Error(), want) {
			t.Errorf("rank %d error:\n%v\nwant it to end with:\n%s", r, err, want)
		}
		// Every rank stops at the fourth forward pass: three steps done,
		// the active ranks' fourth Backward failing without communicating.
		if runs[r].Steps != 3 {
			t.Errorf("rank %d took %d optimizer steps, want 3", r, runs[r].Steps)
		}
	}
	// The three steps all ranks took match PyTorch's first three.
	for r := range runs {
		for i := 0; i < 3; i++ {
			if d := math.Abs(runs[r].Losses[i] - c.Losses[r][i]); d > 1e-5 {
				t.Errorf("rank %d pass %d: loss %v, PyTorch %v", r, i, runs[r].Losses[i], c.Losses[r][i])
			}
		}
	}
}

func TestJoinThrowOnEarlyTerminationEvenInputsSucceeds(t *testing.T) {
	f := loadJoinFixtures(t)
	c := f.find(t, "w2_div_initial")
	_, errs := runJoinCase(t, f, c, []int{3, 3}, nil, ThrowOnEarlyTermination(true))
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

func TestJoinWithBF16Hook(t *testing.T) {
	f := loadJoinFixtures(t)
	for _, name := range []string{"w3_div_initial", "w3_div_active", "w2_accum2"} {
		c := f.find(t, name)
		t.Run(name, func(t *testing.T) {
			runs, errs := runJoinCase(t, f, c, nil, []Option{WithCommHook(BF16CompressHook), BucketCapMB(16.0 / (1 << 20))},
				DivideByInitialWorldSize(c.DivideByInitial))
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			// bfloat16 keeps 8 bits of mantissa: near PyTorch's float32
			// training, and the replicas equal.
			for r, run := range runs {
				if d := maxRelDiffAbs(run.Final, c.Final); d > 2e-2 {
					t.Errorf("rank %d: final weights differ from PyTorch's float32 ones by %g", r, d)
				}
				if !equalBits(run.Final, runs[0].Final) {
					t.Errorf("rank %d's replica differs from rank 0's", r)
				}
			}
		})
	}
}

func equalBits(a, b [][]float32) bool {
	for i := range a {
		for k := range a[i] {
			if math.Float32bits(a[i][k]) != math.Float32bits(b[i][k]) {
				return false
			}
		}
	}
	return true
}

// TestJoinBuffersFollowActiveRank: with a BatchNorm, buffers are broadcast
// from the highest rank still training (rank 0 joins first here, so its
// buffers are stale), and the final model is the last joiner's on every
// rank.
func TestJoinBuffersFollowActiveRank(t *testing.T) {
	counts := []int{1, 4}
	finals := make([][][]float32, 2)
	bufs := make([][]float32, 2)
	tracked := make([]float32, 2)
	errs := runRanks(2, func(rank int, g Group) error {
		bn := nn.BatchNorm1d(3)
		m := nn.Sequential(nn.Linear(4, 3), bn, nn.ReLU(), nn.Linear(3, 2))
		nn.ResetParameters(m, tensor.NewRNG(7))
		dm, err := New(context.Background(), m, g)
		if err != nil {
			return err
		}
		defer dm.Close()
		opt := optim.NewSGD(dm.Parameters(), 0.1)
		rng := tensor.NewRNG(uint64(100 + rank))
		err = dm.Join(context.Background(), func(ctx context.Context) error {
			for s := 0; s < counts[rank]; s++ {
				opt.ZeroGrad()
				if err := nn.CrossEntropy(dm.Forward(tensor.Randn(rng, 4, 4)), []int{0, 1, 0, 1}).Backward(); err != nil {
					return err
				}
				opt.Step()
			}
			return nil
		})
		finals[rank] = paramsOf(m)
		for _, b := range nn.NamedBuffers(m) {
			bufs[rank] = append(bufs[rank], b.Tensor.Data()...)
		}
		tracked[rank] = bn.NumBatchesTracked.Data()[0]
		return err
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if !equalBits(finals[0], finals[1]) {
		t.Errorf("parameters differ across ranks after Join")
	}
	if !equalBits([][]float32{bufs[0]}, [][]float32{bufs[1]}) {
		t.Errorf("buffers differ across ranks after Join: %v vs %v", bufs[0], bufs[1])
	}
	// Rank 1 counted each of its 4 batches on top of its own count; taking
	// joined rank 0's stale buffers would have reset it.
	for r, n := range tracked {
		if n != 4 {
			t.Errorf("rank %d: num_batches_tracked %v after Join, want 4 (rank 1's batches)", r, n)
		}
	}
}

// TestJoinLoopErrorFailsPeers: a rank whose loop fails returns its error
// from Join; its peers are not left waiting (here the in-process group
// breaks as a dead process's connections would).
func TestJoinLoopErrorFailsPeers(t *testing.T) {
	f := loadJoinFixtures(t)
	c := f.find(t, "w3_div_initial")
	errs := runRanks(c.World, func(rank int, g Group) error {
		failAt := -1
		if rank == 2 {
			failAt = 2
		}
		_, err := trainJoinCase(context.Background(), c, f.Batch, f.LR, rank, g, nil, failAt, nil, nil)
		return err
	})
	if !errors.Is(errs[2], errJoinLoop) {
		t.Fatalf("rank 2: got %v, want its loop's error", errs[2])
	}
	for r := 0; r < 2; r++ {
		if !errors.Is(errs[r], errJoinLoop) { // the hub reports the breaking rank's error
			t.Errorf("rank %d: got %v, want a failure from the broken group", r, errs[r])
		}
	}
}

func TestJoinBadUse(t *testing.T) {
	mustPanic := func(name, want string, f func()) {
		t.Helper()
		defer func() {
			r := recover()
			if r == nil || !strings.Contains(fmt.Sprint(r), want) {
				t.Errorf("%s: panic %v, want one containing %q", name, r, want)
			}
		}()
		f()
	}
	mustPanic("no joinables", "no joinables", func() {
		Join(context.Background(), nil, func(context.Context) error { return nil })
	})
	gs := newLocalGroups(1)
	other := newLocalGroups(1)
	a, err := New(context.Background(), smallModel(1), gs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := New(context.Background(), smallModel(1), other[0])
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	mustPanic("two groups", "different process group", func() {
		Join(context.Background(), []Joinable{a, b}, func(context.Context) error { return nil })
	})
	mustPanic("nested", "already inside a Join", func() {
		a.Join(context.Background(), func(ctx context.Context) error {
			return a.Join(ctx, func(context.Context) error { return nil })
		})
	})
}

// joinWorker runs one rank of the fixture case $JOIN_CASE over a real TCP
// group and writes its result to $OUT/join<r>.json. With $JOIN_FAIL_RANK,
// that rank's loop fails at its second step and the process exits.
func joinWorker() error {
	ctx := context.Background()
	rank, _ := strconv.Atoi(os.Getenv("RANK"))
	g, err := distributed.Init(ctx, distributed.Config{InitMethod: "env://", AgentStore: true, Timeout: 20 * time.Second})
	if err != nil {
		return err
	}
	defer g.Destroy()
	f, err := readJoinFixtures()
	if err != nil {
		return err
	}
	c, err := f.lookup(os.Getenv("JOIN_CASE"))
	if err != nil {
		return err
	}
	failAt := -1
	if s := os.Getenv("JOIN_FAIL_RANK"); s != "" {
		if fr, _ := strconv.Atoi(s); fr == rank {
			failAt = 1
		}
	}
	run, err := trainJoinCase(ctx, c, f.Batch, f.LR, rank, g, nil, failAt,
		[]Option{BucketCapMB(16.0 / (1 << 20))}, []JoinOption{DivideByInitialWorldSize(c.DivideByInitial)})
	if err != nil {
		return fmt.Errorf("Join failed: %w", err)
	}
	b, _ := json.Marshal(run)
	return os.WriteFile(filepath.Join(os.Getenv("OUT"), fmt.Sprintf("join%d.json", rank)), b, 0o644)
}

func TestJoinMultiProcessMatchesPyTorch(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	f := loadJoinFixtures(t)
	for _, name := range []string{"w2_div_active", "w3_div_initial", "w3_one_empty", "w2_rank0_empty"} {
		c := f.find(t, name)
		t.Run(name, func(t *testing.T) {
			res, dir := spawnWorker(t, "ddp-join", c.World, "JOIN_CASE="+name)
			runs := make([]joinRun, c.World)
			for r, pr := range res {
				if pr.err != nil {
					t.Fatalf("rank %d failed: %v\n%s", r, pr.err, pr.out)
				}
				b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("join%d.json", r)))
				if err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(b, &runs[r]); err != nil {
					t.Fatal(err)
				}
			}
			checkJoinParity(t, c, runs, 1e-5)
		})
	}
}

func TestJoinMultiProcessLoopErrorFailsPeers(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	res, _ := spawnWorker(t, "ddp-join", 3, "JOIN_CASE=w3_div_initial", "JOIN_FAIL_RANK=1")
	if res[1].err == nil || !strings.Contains(string(res[1].out), errJoinLoop.Error()) {
		t.Fatalf("rank 1 should fail with its own error: %v\n%s", res[1].err, res[1].out)
	}
	for _, r := range []int{0, 2} {
		out := string(res[r].out)
		t.Logf("rank %d: %v\n%s", r, res[r].err, out)
		if res[r].err == nil {
			t.Fatalf("rank %d finished although rank 1 failed:\n%s", r, out)
		}
		if !strings.Contains(out, "rank 1") {
			t.Errorf("rank %d's error does not name rank 1:\n%s", r, out)
		}
	}
}

// sampleCounter is a second Joinable with its own per-step collective: it
// sums the samples every rank trained on, as a sharded optimizer would
// run its own collectives after DDP's.
type sampleCounter struct {
	g      Group
	j      *Joiner
	total  float32
	posted int // PostHook calls
	root   int
}

func (c *sampleCounter) JoinHook(j *Joiner) JoinHook { c.j = j; return c }
func (c *sampleCounter) JoinGroup() Group            { return c.g }

// Count runs the counter's collective for one step of n samples.
func (c *sampleCounter) Count(ctx context.Context, n int) error {
	if _, err := c.j.Notify(ctx, c, true); err != nil {
		return err
	}
	buf := []float32{float32(n)}
	if err := c.g.AllReduce(ctx, buf, distributed.Sum); err != nil {
		return err
	}
	c.total += buf[0]
	return nil
}

func (c *sampleCounter) MainHook(ctx context.Context, r JoinRound) error {
	buf := []float32{0}
	if err := c.g.AllReduce(ctx, buf, distributed.Sum); err != nil {
		return err
	}
	c.total += buf[0]
	return nil
}

func (c *sampleCounter) PostHook(ctx context.Context, lastJoiner bool, root int) error {
	c.posted++
	c.root = root
	return nil
}

func TestJoinSecondJoinable(t *testing.T) {
	f := loadJoinFixtures(t)
	c := f.find(t, "w3_div_initial") // counts 5, 3, 4: rank 0 is the last to join
	counters := make([]*sampleCounter, c.World)
	runs := make([]joinRun, c.World)
	errs := runRanks(c.World, func(rank int, g Group) error {
		m := joinModel(c)
		dm, err := New(context.Background(), m, g)
		if err != nil {
			return err
		}
		defer dm.Close()
		opt := optim.NewSGD(dm.Parameters(), f.LR)
		counters[rank] = &sampleCounter{g: g}
		err = Join(context.Background(), []Joinable{dm, counters[rank]}, func(ctx context.Context) error {
			for s := 0; s < c.Counts[rank]; s++ {
				opt.ZeroGrad()
				x := tensor.New(append([]float32(nil), c.X[rank][s*f.Batch*4:(s+1)*f.Batch*4]...), f.Batch, 4)
				loss := nn.CrossEntropy(dm.Forward(x), c.Y[rank][s*f.Batch:(s+1)*f.Batch])
				runs[rank].Losses = append(runs[rank].Losses, float64(loss.Item()))
				if err := loss.Backward(); err != nil {
					return err
				}
				opt.Step()
				if err := counters[rank].Count(ctx, f.Batch); err != nil {
					return err
				}
			}
			return nil
		})
		runs[rank].Final = paramsOf(m)
		return err
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	checkJoinParity(t, c, runs, 1e-5)
	want := float32(f.Batch * (5 + 3 + 4))
	for r, cn := range counters {
		if cn.total != want || cn.posted != 1 || cn.root != 0 {
			t.Errorf("rank %d: counted %v samples, post-hook ran %d times from root %d; want %v, once, root 0", r, cn.total, cn.posted, cn.root, want)
		}
	}
}
