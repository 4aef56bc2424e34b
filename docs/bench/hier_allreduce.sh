#!/bin/sh
# Hierarchical against flat (ring) allreduce between network namespaces:
# two ranks on each of 2 and of 3 hosts of a testing/clustertest cluster,
# each host's link shaped to 1 Gbit/s (tc tbf), `gotrain bench allreduce
# --hosts … --algo ring|hierarchical` over ssh, and PyTorch's gloo
# (docs/bench/torch2_env.sh's venv) as two ranks per host in the same
# network namespaces. Runs BenchmarkClusterHierAllreduce once.
#
#   docs/bench/hier_allreduce.sh [SIZES]     # bytes, comma-separated; default 16 and 64 MiB
#   GOTRAIN_NO_GLOO=1 docs/bench/hier_allreduce.sh   # without gloo
#
# Prints per layout and size the busbw (GB/s) of flat, hierarchical and
# gloo, hierarchical/flat (target ≥ 1.4) and hierarchical/gloo. Needs
# root, iproute2, nftables and openssh-server. Run from the repository
# root on an otherwise idle machine.
set -eu
export HIER_BENCH_SIZES="${1:-16777216,67108864}"
if [ "${GOTRAIN_NO_GLOO:-0}" != 1 ]; then
	HIER_BENCH_PY=$(docs/bench/torch2_env.sh)
	export HIER_BENCH_PY
fi
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
GOTRAIN_REQUIRE_ENGINES=1 go test ./cmd/gotrain -run '^$' -bench '^BenchmarkClusterHierAllreduce$' \
	-benchtime 1x -timeout 60m -v >"$tmp" 2>&1 || { cat "$tmp"; exit 1; }
# A result line: BenchmarkClusterHierAllreduce/2x2-8  1  <ns> ns/op  <v> <name> …
awk '
/^BenchmarkClusterHierAllreduce\// {
	split($1, p, "/"); sub(/-[0-9]+$/, "", p[2]); layout = p[2]
	for (i = 5; i < NF; i += 2) {
		name = $(i+1); v = $i
		if (match(name, /_[0-9]+(MiB|B)$/)) {
			size = substr(name, RSTART + 1); key = substr(name, 1, RSTART - 1)
			val[layout, size, key] = v; if (!((layout, size) in seen)) { seen[layout, size] = 1; order[++n] = layout SUBSEP size }
		}
	}
}
END {
	printf "%-6s %-8s %10s %10s %10s %10s %10s\n", "layout", "size", "flat", "hier", "gloo", "hier/flat", "hier/gloo"
	for (i = 1; i <= n; i++) {
		split(order[i], k, SUBSEP); l = k[1]; s = k[2]
		g = ((l, s, "gloo_busbw_GBps") in val) ? val[l, s, "gloo_busbw_GBps"] : "-"
		hg = ((l, s, "hier_over_gloo") in val) ? val[l, s, "hier_over_gloo"] : "-"
		printf "%-6s %-8s %10s %10s %10s %10s %10s\n", l, s, val[l, s, "flat_busbw_GBps"], val[l, s, "hier_busbw_GBps"], g, val[l, s, "hier_over_flat"], hg
	}
	if (n == 0) exit 1
}' "$tmp" || { cat "$tmp"; exit 1; }
