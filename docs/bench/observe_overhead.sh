#!/bin/sh
# The cost of watching a run: samples/s of `gotrain train mnist` on N local
# workers without observation, with --metrics, with --metrics and --trace,
# and with everything (Prometheus and the dashboard too), interleaved round
# by round so that drift on a shared machine hits every variant alike.
#
#   docs/bench/observe_overhead.sh [ROUNDS] [-- extra train mnist flags]
#
# Prints one line per run and, per variant, the median samples/s and its
# overhead against the unobserved median. Needs a built gotrain on PATH or
# in $GOTRAIN.
set -eu
GOTRAIN=${GOTRAIN:-gotrain}
ROUNDS=${1:-5}
[ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift
NPROC=${NPROC:-2}
STEPS=${STEPS:-600}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

run() { # variant flags...
	v=$1
	shift
	sps=$("$GOTRAIN" train mnist --nproc-per-node "$NPROC" --max-steps "$STEPS" --progress=true "$@" 2>/dev/null |
		tail -n 1 | tr ' ' '\n' | sed -n 's/^samples_per_s=//p')
	echo "variant=$v samples_per_s=$sps"
	echo "$sps" >>"$tmp/$v"
}

variant() { # index flags...
	k=$1
	shift
	case $k in
	0) run none "$@" ;;
	1) run metrics --metrics "$tmp/m.jsonl" "$@" ;;
	2) run metrics+trace --metrics "$tmp/m.jsonl" --trace "$tmp/t.json" "$@" ;;
	3) run all --metrics "$tmp/m.jsonl" --trace "$tmp/t.json" --metrics-addr 127.0.0.1:0 --dashboard 127.0.0.1:0 "$@" ;;
	esac
}

# Each round starts with the next variant, so that no variant always runs
# first (the first run of a round was measurably favoured).
i=1
while [ "$i" -le "$ROUNDS" ]; do
	j=0
	while [ "$j" -lt 4 ]; do
		variant $(((i + j - 1) % 4)) "$@"
		j=$((j + 1))
	done
	i=$((i + 1))
done

median() { sort -n "$1" | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
base=$(median "$tmp/none")
for v in none metrics metrics+trace all; do
	m=$(median "$tmp/$v")
	awk -v v="$v" -v m="$m" -v b="$base" -v r="$ROUNDS" \
		'BEGIN {printf "summary variant=%s rounds=%d samples_per_s_median=%.0f overhead_pct=%.2f\n", v, r, m, 100*(b-m)/b}'
done
