#!/bin/sh
# DDP against LocalSGD, DiLoCo and streaming DiLoCo on an ordinary link:
# two network-namespace nodes of one worker each (testing/clustertest,
# needs root, iproute2 and nftables), each node's link shaped in rate
# only, with tc tbf (default 100 Mbit/s): the kernel has no sch_netem, so
# no delay or loss is emulated. They train the default GPT for the same
# steps with
#
#   ddp           gotrain train gpt
#   localsgd20    gotrain train gpt --local-sgd 20
#   diloco20      gotrain train gpt --diloco 20
#   diloco100     gotrain train gpt --diloco 100
#   streaming100  gotrain train gpt --diloco 100 --diloco-fragments 4 --diloco-bf16 --diloco-delay 1
#
# (DiLoCo's outer optimizer at its defaults, --diloco-outer-lr 0.7
# --diloco-outer-momentum 0.9), batch 8 × 128 tokens per worker. It
# prints per mode tokens/s, the bytes rank 0 sends per token it trains,
# the validation loss, and tokens/s and loss over DDP's.
#
#   docs/bench/diloco.sh                         # 1000 steps each (hours on 2 cores)
#   STEPS=10 docs/bench/diloco.sh                # a quick check that it works (under a minute)
#   STEPS=10 MODES=ddp,diloco20 docs/bench/diloco.sh
#   RATE=1000000000 docs/bench/diloco.sh        # a 1 Gbit/s link
#
# Run from anywhere on an otherwise idle machine.
set -eu
cd "$(dirname "$0")/../.."
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
BENCH_DILOCO_STEPS="${STEPS:-}" BENCH_DILOCO_MODES="${MODES:-}" BENCH_DILOCO_RATE="${RATE:-}" \
	GOTRAIN_REQUIRE_ENGINES=1 go test ./cmd/gotrain -run '^$' -bench '^BenchmarkClusterDiLoCo$' \
	-benchtime 1x -timeout 12h -v >"$tmp" 2>&1 || { cat "$tmp"; exit 1; }
# The result line: BenchmarkClusterDiLoCo-8  1  <ns> ns/op  <v> <mode>_<metric> …
awk '
/^BenchmarkClusterDiLoCo/ && / ns\/op/ {
	for (i = 5; i < NF; i += 2) {
		name = $(i+1); v = $i
		if (match(name, /_(tokens_per_s|bytes_per_token|val_loss|over_ddp_tokens_per_s|over_ddp_val_loss)$/)) {
			mode = substr(name, 1, RSTART - 1); key = substr(name, RSTART + 1)
			val[mode, key] = v; if (!(mode in seen)) { seen[mode] = 1; order[++n] = mode }
		}
	}
}
END {
	printf "%-13s %12s %14s %9s %14s %12s\n", "mode", "tokens/s", "bytes/token", "val_loss", "tokens/s÷ddp", "loss÷ddp"
	for (i = 1; i <= n; i++) {
		m = order[i]
		r = ((m, "over_ddp_tokens_per_s") in val) ? val[m, "over_ddp_tokens_per_s"] : "-"
		l = ((m, "over_ddp_val_loss") in val) ? val[m, "over_ddp_val_loss"] : "-"
		printf "%-13s %12s %14s %9s %14s %12s\n", m, val[m, "tokens_per_s"], val[m, "bytes_per_token"], val[m, "val_loss"], r, l
	}
	if (n == 0) exit 1
}' "$tmp" || { cat "$tmp"; exit 1; }
