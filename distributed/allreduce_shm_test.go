package distributed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gotrain/gotrain/distributed/shm"
	"github.com/gotrain/gotrain/internal/testlog"
)

// TestSharedMemoryChosen: ranks on one host get the arena unless shared
// memory is off or another algorithm is forced, and no file is left in
// /dev/shm.
func TestSharedMemoryChosen(t *testing.T) {
	job := fmt.Sprintf("test%d_%d", os.Getpid(), time.Now().UnixNano()) // names this test's files only
	t.Setenv("GOTRAIN_RUN_ID", job)
	cases := []struct {
		name string
		env  string
		algo string
		want bool
	}{
		{"auto", "", AlgoAuto, true},
		{"forced", "", AlgoShm, true},
		{"ring", "", AlgoRing, false},
		{"off", "0", AlgoAuto, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("GOTRAIN_SHM", tc.env)
			}
			runGroup(t, 2, func(c *Config) { c.AllReduceAlgo = tc.algo }, func(ctx context.Context, g *Group) error {
				if got := g.SharedMemory(); got != tc.want {
					return fmt.Errorf("SharedMemory() = %v, want %v", got, tc.want)
				}
				x := []float32{float32(g.Rank() + 1)}
				if err := g.AllReduce(ctx, x, Sum); err != nil {
					return err
				}
				if x[0] != 3 {
					return fmt.Errorf("sum = %v, want 3", x[0])
				}
				return nil
			})
		})
	}
	if left, _ := filepath.Glob(shm.FilePattern(job)); len(left) > 0 {
		t.Errorf("shared-memory files left behind: %v", left)
	}
}

// TestSharedMemoryAllReduceIdentical: an average over several chunks, with
// a size that does not divide into shares, is close to the float64 result
// and bitwise identical on every rank.
func TestSharedMemoryAllReduceIdentical(t *testing.T) {
	const n = 3*shm.ArenaChunk/4 + 12345 // 3+ chunks of float32
	runGroup(t, 3, nil, func(ctx context.Context, g *Group) error {
		if !g.SharedMemory() {
			return fmt.Errorf("no shared-memory arena")
		}
		input := func(r int) []float32 {
			rng := rand.New(rand.NewPCG(uint64(r), 7))
			x := make([]float32, n)
			for i := range x {
				x[i] = rng.Float32()*2 - 1
			}
			return x
		}
		x := input(g.Rank())
		if err := g.AllReduce(ctx, x, Avg); err != nil {
			return err
		}
		want := make([]float64, n)
		for r := 0; r < 3; r++ {
			for i, v := range input(r) {
				want[i] += float64(v) / 3
			}
		}
		var h uint64 = 14695981039346656037
		for i, v := range x {
			if math.Abs(float64(v)-want[i]) > 1e-6 {
				return fmt.Errorf("element %d = %v, want %v", i, v, want[i])
			}
			h = (h ^ uint64(math.Float32bits(v))) * 1099511628211
		}
		lo, hi := []int64{int64(h >> 1)}, []int64{int64(h >> 1)}
		if err := g.AllReduce(ctx, lo, Min); err != nil {
			return err
		}
		if err := g.AllReduce(ctx, hi, Max); err != nil {
			return err
		}
		if lo[0] != hi[0] {
			return fmt.Errorf("ranks' results differ (hashes %x..%x)", lo[0], hi[0])
		}
		return nil
	})
}

// TestSharedMemoryCountMismatch: two ranks reducing different lengths
// both fail with ErrMismatch naming the other's operation.
func TestSharedMemoryCountMismatch(t *testing.T) {
	runGroup(t, 2, nil, func(ctx context.Context, g *Group) error {
		err := g.AllReduce(ctx, make([]float32, 100+g.Rank()), Sum)
		if err == nil || !errors.Is(err, ErrMismatch) {
			return fmt.Errorf("got %v, want ErrMismatch", err)
		}
		return nil
	})
}

func TestShareBounds(t *testing.T) {
	for _, size := range []int{0, 4, 60, 64, 100, 1000, shm.ArenaChunk, shm.ArenaChunk - 4} {
		for n := 1; n <= 7; n++ {
			end := 0
			for r := 0; r < n; r++ {
				lo, hi := shareBounds(size, r, n)
				if lo != end || hi < lo || (lo%64 != 0 && lo != size) {
					t.Fatalf("size %d, %d ranks: share %d is [%d,%d) after %d", size, n, r, lo, hi, end)
				}
				end = hi
			}
			if end != size {
				t.Fatalf("size %d, %d ranks: shares cover %d bytes", size, n, end)
			}
		}
	}
}

// TestSharedMemoryFullFallsBack: when /dev/shm cannot hold the arena (as
// in a container's small default), the group warns and reduces over the
// sockets instead of dying of SIGBUS later.
func TestSharedMemoryFullFallsBack(t *testing.T) {
	createArena = func(int) (string, string, []byte, error) {
		return "", "", nil, fmt.Errorf("reserve the arena in /dev/shm: %w", syscall.ENOSPC)
	}
	defer func() { createArena = shm.CreateArena }()
	var logs testlog.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	runGroup(t, 2, func(c *Config) { c.Logger = log }, func(ctx context.Context, g *Group) error {
		if g.SharedMemory() {
			return errors.New("SharedMemory() = true with a full /dev/shm")
		}
		x := make([]float32, 1<<20)
		for i := range x {
			x[i] = float32(g.Rank() + 1)
		}
		if err := g.AllReduce(ctx, x, Sum); err != nil {
			return err
		}
		if x[0] != 3 || x[len(x)-1] != 3 {
			return fmt.Errorf("sum %v…%v, want 3", x[0], x[len(x)-1])
		}
		return nil
	})
	if !strings.Contains(logs.String(), "no shared-memory arena") || !strings.Contains(logs.String(), "no space left") {
		t.Errorf("no warning naming the cause; log:\n%s", logs.String())
	}
}
