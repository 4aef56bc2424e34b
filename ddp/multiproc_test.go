package ddp

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
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
)

// Multi-process tests re-run this test binary as the ranks, each running
// ddpWorker.
const (
	testToken   = "ddp-test-token"
	killRankEnv = "GOTRAIN_DDP_TEST_KILL_RANK"
)

func TestMain(m *testing.M) {
	testproc.Dispatch(testproc.Workers{
		"ddp":         func() int { return testproc.ExitCode(ddpWorker()) },
		"ddp-sigterm": func() int { return testproc.ExitCode(sigtermWorker()) },
		"ddp-join":    func() int { return testproc.ExitCode(joinWorker()) },
		"syncbn":      func() int { return testproc.ExitCode(syncBNWorker()) },
	})
	os.Exit(m.Run())
}

// ddpWorker trains smallModel on its shard of fixedData with DDP over a real
// TCP process group and writes its final parameters to $OUT/rank<r>.bin.
func ddpWorker() error {
	ctx := context.Background()
	rank, _ := strconv.Atoi(os.Getenv("RANK"))
	g, err := distributed.Init(ctx, distributed.Config{InitMethod: "env://", AgentStore: true, Timeout: 20 * time.Second})
	if err != nil {
		return err
	}
	defer g.Destroy()
	world := g.Size()
	m := smallModel(uint64(1 + rank*1000))
	dm, err := New(ctx, m, g, BucketCapMB(256.0/(1<<20)))
	if err != nil {
		return err
	}
	defer dm.Close()
	opt := optim.NewSGD(dm.Parameters(), 0.1, optim.Momentum(0.9))
	x, y := fixedData(steps * perRank * world)
	kill := -1
	if s := os.Getenv(killRankEnv); s != "" {
		kill, _ = strconv.Atoi(s)
	}
	for s := 0; s < steps; s++ {
		if rank == kill && s == 5 {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		opt.ZeroGrad()
		base := s * perRank * world
		bx, by := slice(x, y, base+rank*perRank, base+(rank+1)*perRank)
		start := time.Now()
		if err := nn.CrossEntropy(dm.Forward(bx), by).Backward(); err != nil {
			return fmt.Errorf("step %d, Backward failed after %v: %w", s, time.Since(start).Round(time.Millisecond), err)
		}
		opt.Step()
	}
	var buf bytes.Buffer
	for _, p := range nn.Parameters(m) {
		binary.Write(&buf, binary.LittleEndian, p.Data())
	}
	return os.WriteFile(filepath.Join(os.Getenv("OUT"), fmt.Sprintf("rank%d.bin", rank)), buf.Bytes(), 0o644)
}

type procResult struct {
	out []byte
	err error
}

// spawn runs world ranks of this test binary as DDP workers around a
// store served here, and returns each rank's output and exit error.
func spawn(t *testing.T, world int, extraEnv ...string) ([]procResult, string) {
	t.Helper()
	return spawnWorker(t, "ddp", world, extraEnv...)
}

// spawnWorker is spawn for any worker of TestMain.
func spawnWorker(t *testing.T, worker string, world int, extraEnv ...string) ([]procResult, string) {
	t.Helper()
	srv, err := store.Listen("127.0.0.1:0", []byte(testToken))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	host, port, _ := strings.Cut(srv.Addr().String(), ":")
	out := t.TempDir()
	ranks := testproc.Start(t, worker, world, testproc.Options{
		Env: append([]string{"MASTER_ADDR=" + host, "MASTER_PORT=" + port, "GOTRAIN_TOKEN=" + testToken,
			"GOTRAIN_RUN_ID=" + t.Name(), "OUT=" + out}, extraEnv...),
	})
	ranks.Wait()
	res := make([]procResult, world)
	for r, p := range ranks.Procs() {
		res[r] = procResult{out: []byte(p.Text()), err: p.Err()}
	}
	return res, out
}

func readParams(t *testing.T, path string) []float32 {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v := make([]float32, len(b)/4)
	binary.Read(bytes.NewReader(b), binary.LittleEndian, v)
	return v
}

func TestMultiProcessDDPMatchesSingleProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	res, dir := spawn(t, worldSize)
	for r, pr := range res {
		if pr.err != nil {
			t.Fatalf("rank %d failed: %v\n%s", r, pr.err, pr.out)
		}
	}
	var all []float32 // the single-process parameters, flattened like the workers'
	for _, p := range reference(t, 1) {
		all = append(all, p...)
	}
	r0 := readParams(t, filepath.Join(dir, "rank0.bin"))
	r1 := readParams(t, filepath.Join(dir, "rank1.bin"))
	if d := maxRelDiff([][]float32{r0}, [][]float32{all}); d > 1e-5 {
		t.Errorf("multi-process DDP differs from single-process training: max relative difference %g", d)
	}
	for i := range r0 {
		if math.Float32bits(r0[i]) != math.Float32bits(r1[i]) {
			t.Fatalf("parameter element %d: rank 0 %v, rank 1 %v: replicas not bitwise identical", i, r0[i], r1[i])
		}
	}
}

func TestMultiProcessKilledRankFailsBackwardNamingIt(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	const world, victim = 3, 2
	res, _ := spawn(t, world, killRankEnv+"="+strconv.Itoa(victim))
	for r, pr := range res {
		if r == victim {
			if pr.err == nil {
				t.Fatalf("victim rank %d exited cleanly", r)
			}
			continue
		}
		out := string(pr.out)
		t.Logf("rank %d: %v\n%s", r, pr.err, out)
		if pr.err == nil {
			t.Fatalf("rank %d finished training although rank %d died:\n%s", r, victim, out)
		}
		if !strings.Contains(out, "Backward failed") || !strings.Contains(out, "rank 2") {
			t.Errorf("rank %d error does not come from Backward naming rank 2:\n%s", r, out)
		}
		// The failure must be prompt (within 2 s of the peer's death),
		// not the 20 s operation timeout.
		if i := strings.Index(out, "Backward failed after "); i >= 0 {
			var d time.Duration
			f := strings.Fields(out[i+len("Backward failed after "):])
			if len(f) > 0 {
				d, _ = time.ParseDuration(strings.TrimSuffix(f[0], ":"))
			}
			if d > 2*time.Second {
				t.Errorf("rank %d took %v to notice the dead peer", r, d)
			}
		}
	}
}
