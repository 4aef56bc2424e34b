package harness

import (
	"log/slog"
	"os"
	"runtime/debug"
)

// shardedGCPercent is the garbage collector's target under sharding: the
// heap may grow a quarter beyond what the last collection found live,
// not the default double. A sharded rank's heap is mostly float32
// buffers, which the collector does not scan, so collecting four times
// as often costs little (about 2% of a worker's CPU on the GPT), while
// the default lets the heap reach twice the activations and gathered
// units, undoing much of what sharding saves.
const shardedGCPercent = 25

// tuneGCForSharding sets shardedGCPercent unless the user chose a
// target with GOGC.
func tuneGCForSharding() {
	if os.Getenv("GOGC") != "" {
		return
	}
	prev := debug.SetGCPercent(shardedGCPercent)
	slog.Debug("harness: garbage collector target for sharded training", "gogc", shardedGCPercent, "was", prev)
}
