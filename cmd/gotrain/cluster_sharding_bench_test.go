package main

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testproc"
	"github.com/gotrain/gotrain/testing/clustertest"
)

// shardingBenchModes are BenchmarkClusterSharding's default --sharding
// values: DDP first, the others' base.
var shardingBenchModes = []string{"none", "hybrid", "full"}

// BenchmarkClusterSharding: 2 nodes × 2 workers (one thread each) on a
// tbf-shaped link (default 1 Gbit/s each way) train the GPT for the same
// steps under DDP (`--sharding none`), HYBRID_SHARD (`--sharding
// hybrid`: parameters gathered within a node, gradients reduced across)
// and FULL_SHARD over all four ranks (`--sharding full`); run by
// docs/bench/hybrid.sh. Metrics per mode: tokens/s of all ranks, rank
// 0's peak RSS in MiB, and tokens/s over DDP's (target for hybrid ≥ 0.9).
//
// BENCH_SHARDING_STEPS sets the steps (default 100), BENCH_SHARDING_MODES
// the modes (comma-separated --sharding values, none first for the
// ratios), BENCH_SHARDING_RATE the link in bit/s, and
// BENCH_SHARDING_FLAGS more `train gpt` flags, space-separated (the
// model: default the default GPT, e.g. "--n-layer 12 --n-embd 768
// --block-size 256 --batch-size 4").
func BenchmarkClusterSharding(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	steps, rate := 100, int64(1e9)
	if v := os.Getenv("BENCH_SHARDING_STEPS"); v != "" {
		if steps, err = strconv.Atoi(v); err != nil || steps < 1 {
			b.Fatalf("BENCH_SHARDING_STEPS=%q: want a number of steps ≥ 1", v)
		}
	}
	if v := os.Getenv("BENCH_SHARDING_RATE"); v != "" {
		if rate, err = strconv.ParseInt(v, 10, 64); err != nil || rate < 1 {
			b.Fatalf("BENCH_SHARDING_RATE=%q: want bits per second ≥ 1", v)
		}
	}
	modes := shardingBenchModes
	if v := os.Getenv("BENCH_SHARDING_MODES"); v != "" {
		modes = strings.Split(v, ",")
		for _, m := range modes {
			if !slices.Contains([]string{"none", "zero1", "zero2", "full", "hybrid"}, m) {
				b.Fatalf("BENCH_SHARDING_MODES: unknown mode %q (want none, zero1, zero2, full or hybrid)", m)
			}
		}
	}
	flags := strings.Fields(os.Getenv("BENCH_SHARDING_FLAGS"))
	c := clustertest.New(b, clustertest.Options{Hosts: 2, NoSSH: true})
	for _, h := range c.Hosts {
		h.Shape(b, rate, 0)
	}
	for i := 0; i < b.N; i++ {
		base := 0.0
		for _, m := range modes {
			args := append([]string{"gpt", "--sharding", m, "--max-steps", strconv.Itoa(steps), "--eval-every", strconv.Itoa(steps)}, flags...)
			sum := runShardingBench(b, c, exe, args)
			if m != "none" && !strings.Contains(sum.line, "sharding="+m) {
				b.Fatalf("--sharding %s: the summary does not name the strategy: %s", m, sum.line)
			}
			tps := sum.values["tokens_per_s"]
			b.ReportMetric(tps, m+"_tokens_per_s")
			b.ReportMetric(sum.values["peak_rss_mib"], m+"_peak_rss_mib")
			if m == "none" {
				base = tps
			} else if base > 0 {
				b.ReportMetric(tps/base, m+"_over_ddp_tokens_per_s")
			}
		}
	}
}

// shardingRun is rank 0's summary line of one run and its numbers.
type shardingRun struct {
	line   string
	values map[string]float64
}

// runShardingBench trains `gotrain train <args>` on the two hosts of c,
// two workers each (`gotrain run --nnodes 2 --nproc-per-node 2` on each
// host), and returns rank 0's summary.
func runShardingBench(b *testing.B, c *clustertest.Cluster, exe string, args []string) shardingRun {
	b.Helper()
	outs := onHosts(b, c, 2*time.Hour, "",
		func(r int) []string {
			argv := []string{exe, "run", "--nnodes", "2", "--node-rank", strconv.Itoa(r), "--nproc-per-node", "2",
				"--master-addr", c.Hosts[0].Addr, "--master-port", "29500", exe, "train"}
			argv = append(argv, args...)
			return append(argv, "--progress=false")
		},
		func(int) []string {
			return []string{testproc.Env("gotrain"), "GOTRAIN_TOKEN=0123456789abcdef0123456789abcdef", "GOTRAIN_NUM_THREADS=1"}
		})
	run := shardingRun{line: strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(lastRank0Line(outs[0])), "[rank0]: ")), values: map[string]float64{}}
	for _, f := range strings.Fields(run.line) {
		if k, v, ok := strings.Cut(f, "="); ok {
			if x, err := strconv.ParseFloat(v, 64); err == nil {
				run.values[k] = x
			}
		}
	}
	if run.values["tokens_per_s"] == 0 {
		b.Fatalf("train %s: no tokens_per_s in node 0's summary:\n%s", strings.Join(args, " "), outs[0])
	}
	return run
}
