package shm

import "testing"

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
