package shm

import (
	"errors"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testproc"
)

func TestChunkFor(t *testing.T) {
	prev := ArenaChunk
	for n := 2; n <= ArenaMaxRanks; n++ {
		c := chunkFor(n)
		if c > prev || c < arenaMinChunk || c%(64<<10) != 0 {
			t.Fatalf("chunkFor(%d) = %d after %d", n, c, prev)
		}
		if data := 2 * n * c; data > arenaBudget && c > arenaMinChunk {
			t.Fatalf("%d ranks: %d bytes of data areas, budget %d", n, data, arenaBudget)
		}
		prev = c
	}
	if chunkFor(2) != ArenaChunk {
		t.Errorf("2 ranks: chunk %d, want %d", chunkFor(2), ArenaChunk)
	}
}

// TestArenaLagging: a rank that has published a phase reports the peers
// that have not reached it, and none once they have.
func TestArenaLagging(t *testing.T) {
	const n = 3
	mem := make([]byte, arenaFileSize(n))
	as := make([]*Arena, n)
	for r := range as {
		as[r] = NewArena(mem, r, n)
	}
	if got := as[0].Lagging(nil); len(got) != 0 {
		t.Fatalf("before any phase: lagging %v, want none", got)
	}
	done := make(chan error, 1)
	go func() { done <- as[0].PublishAndWait(func(int, uint64) error { return nil }) }()
	// Rank 0 has published once its goroutine runs: nothing tells.
	if !testproc.Poll(5*time.Second, func() bool { return len(as[0].Lagging(nil)) == 2 }) {
		t.Fatalf("rank 0 waiting: lagging %v, want [1 2]", as[0].Lagging(nil))
	}
	if got := as[0].Lagging(nil); got[0] != 1 || got[1] != 2 {
		t.Fatalf("rank 0 waiting: lagging %v, want [1 2]", got)
	}
	if got := as[1].Lagging(nil); len(got) != 0 {
		t.Errorf("rank 1, not waiting: lagging %v, want none", got)
	}
	done2 := make(chan error, 1)
	go func() { done2 <- as[2].PublishAndWait(func(int, uint64) error { return nil }) }()
	if err := as[1].PublishAndWait(func(int, uint64) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(<-done, <-done2); err != nil {
		t.Fatal(err)
	}
	if got := as[0].Lagging(nil); len(got) != 0 {
		t.Errorf("after the phase: lagging %v, want none", got)
	}
}
