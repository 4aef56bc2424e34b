#!/bin/sh
# HYBRID_SHARD against DDP across two nodes: two network-namespace nodes
# of two workers each (testing/clustertest, needs root, iproute2 and
# nftables), each node's link shaped in rate only with tc tbf (default
# 1 Gbit/s each way), one thread per worker. They train the GPT for the
# same steps with
#
#   none    gotrain train gpt --sharding none     DDP
#   hybrid  gotrain train gpt --sharding hybrid   sharded within a node, replicated across
#   full    gotrain train gpt --sharding full     sharded over all four workers
#
# and it prints per mode tokens/s of all workers, rank 0's peak RSS and
# tokens/s over DDP's (target for hybrid: ≥ 0.9).
#
#   docs/bench/hybrid.sh                                   # the default GPT, 100 steps each
#   STEPS=3 FLAGS='--n-layer 1 --n-embd 64 --block-size 32 --batch-size 2' docs/bench/hybrid.sh   # a quick check that it works
#   FLAGS='--n-layer 12 --n-embd 768 --block-size 256 --batch-size 4' docs/bench/hybrid.sh
#   MODES=none,zero1,zero2,full,hybrid RATE=100000000 docs/bench/hybrid.sh   # every strategy, a 100 Mbit/s link
#
# Run from anywhere on an otherwise idle machine.
set -eu
cd "$(dirname "$0")/../.."
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
BENCH_SHARDING_STEPS="${STEPS:-}" BENCH_SHARDING_MODES="${MODES:-}" BENCH_SHARDING_RATE="${RATE:-}" \
	BENCH_SHARDING_FLAGS="${FLAGS:-}" \
	GOTRAIN_REQUIRE_ENGINES=1 go test ./cmd/gotrain -run '^$' -bench '^BenchmarkClusterSharding$' \
	-benchtime 1x -timeout 12h -v >"$tmp" 2>&1 || { cat "$tmp"; exit 1; }
# The result line: BenchmarkClusterSharding-8  1  <ns> ns/op  <v> <mode>_<metric> …
# (metrics sorted by name; the table keeps the order of MODES)
awk -v modes="${MODES:-none,hybrid,full}" '
/^BenchmarkClusterSharding/ && / ns\/op/ {
	for (i = 5; i < NF; i += 2) {
		name = $(i+1); v = $i
		if (match(name, /_(tokens_per_s|peak_rss_mib|over_ddp_tokens_per_s)$/)) {
			mode = substr(name, 1, RSTART - 1); key = substr(name, RSTART + 1)
			val[mode, key] = v
		}
	}
}
END {
	n = split(modes, order, ",")
	printf "%-8s %12s %14s %14s\n", "mode", "tokens/s", "rank0 RSS MiB", "tokens/s÷ddp"
	for (i = 1; i <= n; i++) {
		m = order[i]
		if (!((m, "tokens_per_s") in val)) { missing = 1; continue }
		r = ((m, "over_ddp_tokens_per_s") in val) ? val[m, "over_ddp_tokens_per_s"] : "-"
		printf "%-8s %12s %14s %14s\n", m, val[m, "tokens_per_s"], val[m, "peak_rss_mib"], r
	}
	if (missing) exit 1
}' "$tmp" || { cat "$tmp"; exit 1; }
