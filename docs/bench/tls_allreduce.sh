#!/bin/sh
# Allreduce with mutual TLS against plain TCP, side by side: `gotrain
# bench allreduce --algo ring` with and without --tls-ca/--tls-cert/
# --tls-key (certificates of `gotrain tls init`), two ranks on loopback
# (shared memory off), and one rank on each of two network-namespace hosts
# (testing/clustertest) over plain veth and over a 1 Gbit/s tbf-shaped
# link. Runs BenchmarkClusterTLSAllreduce once.
#
#   docs/bench/tls_allreduce.sh [SIZES]   # bytes, comma-separated; default 16 and 64 MiB
#   docs/bench/tls_allreduce.sh 65536     # a quick check that it works
#
# Prints per link and size the busbw (GB/s) plain and with TLS and
# TLS/plain (targets: >= 0.85 on the shaped link, >= 0.6 on veth), and the
# negotiated cipher suite. Needs root, iproute2, nftables and
# openssh-server. Run from the repository root on an otherwise idle
# machine.
set -eu
cd "$(dirname "$0")/../.."
export TLS_BENCH_SIZES="${1:-16777216,67108864}"
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
GOTRAIN_REQUIRE_ENGINES=1 go test ./cmd/gotrain -run '^$' -bench '^BenchmarkClusterTLSAllreduce$' \
	-benchtime 1x -timeout 60m -v >"$tmp" 2>&1 || { cat "$tmp"; exit 1; }
grep -o 'cipher suite .*' "$tmp" | sort -u
# A result line: BenchmarkClusterTLSAllreduce/veth-8  1  <ns> ns/op  <v> <name> …
awk '
/^BenchmarkClusterTLSAllreduce\// {
	split($1, p, "/"); sub(/-[0-9]+$/, "", p[2]); link = p[2]
	for (i = 5; i < NF; i += 2) {
		name = $(i + 1); v = $i
		tag = name; sub(/.*_/, "", tag)
		if (name ~ /^plain_busbw/) plain[link, tag] = v
		if (name ~ /^tls_busbw/) tls[link, tag] = v
		if (name ~ /^tls_over_plain/) { ratio[link, tag] = v; order[++n] = link SUBSEP tag }
	}
}
END {
	printf "%-9s %-9s %12s %12s %10s\n", "link", "size", "plain_GBps", "tls_GBps", "tls/plain"
	for (k = 1; k <= n; k++) {
		split(order[k], q, SUBSEP)
		printf "%-9s %-9s %12.3f %12.3f %10.2f\n", q[1], q[2], plain[order[k]], tls[order[k]], ratio[order[k]]
	}
}' "$tmp"
