package checkpoint

import (
	"context"
	"os"
	"strconv"
	"testing"
)

// shardedBenchTensors is a model of about mb MiB of float32 state in
// tensors of uneven sizes; GOTRAIN_BENCH_SHARDED_MB sets mb (default 64).
func shardedBenchTensors(b *testing.B) map[string]fullTensor {
	mb := 64
	if s := os.Getenv("GOTRAIN_BENCH_SHARDED_MB"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			b.Fatalf("GOTRAIN_BENCH_SHARDED_MB=%q: want a whole number of MiB, at least 1", s)
		}
		mb = v
	}
	full := map[string]fullTensor{}
	left := mb << 18 // floats
	for i := 0; left > 0; i++ {
		n := min(left, 1<<20+1013*i)
		d := make([]float32, n)
		for j := range d {
			d[j] = float32(j%977) / 977
		}
		full["layer"+strconv.Itoa(i)+".weight"] = fullTensor{shape: []int{n}, data: d}
		left -= n
	}
	return full
}

func fullBytes(full map[string]fullTensor) int64 {
	var n int64
	for _, t := range full {
		n += 4 * int64(len(t.data))
	}
	return n
}

// BenchmarkShardedSave saves FULL_SHARD state of 4 in-process ranks into
// one directory (bytes/s over the whole state).
func BenchmarkShardedSave(b *testing.B) {
	full := shardedBenchTensors(b)
	dir := b.TempDir()
	st := fsdpState(full, 4)
	b.SetBytes(fullBytes(full))
	b.ResetTimer()
	for range b.N {
		noErrorsB(b, saveAll(4, func(int) string { return dir }, st))
	}
}

// BenchmarkShardedLoadReshard loads a world-4 FULL_SHARD save into 3
// ranks' thirds, from a shared directory and from one directory per
// host (shards sent between ranks).
func BenchmarkShardedLoadReshard(b *testing.B) {
	full := shardedBenchTensors(b)
	for _, layout := range []string{"shared", "per-host"} {
		b.Run(layout, func(b *testing.B) {
			base := b.TempDir()
			host := func(r int) string {
				if layout == "shared" || r < 2 {
					return base + "/A"
				}
				return base + "/B"
			}
			noErrorsB(b, saveAll(4, host, fsdpState(full, 4)))
			b.SetBytes(fullBytes(full))
			b.ResetTimer()
			for range b.N {
				_, errs := onRanks(ShardHubGroups(3), func(g Group) (*ShardedLoad, error) {
					return LoadSharded(context.Background(), g, host(min(2*g.Rank(), 3)), fsdpRequests(full, 3, g.Rank()))
				})
				noErrorsB(b, errs)
			}
		})
	}
}

func noErrorsB(b *testing.B, errs []error) {
	b.Helper()
	for r, err := range errs {
		if err != nil {
			b.Fatalf("rank %d: %v", r, err)
		}
	}
}
