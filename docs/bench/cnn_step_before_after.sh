#!/bin/sh
# One-thread training-step benchmarks of the tensor package at a base
# revision and at the work tree, run alternately round by round so that
# drift on a shared machine hits both alike, next to the GEMM-rate bound
# of the CNN step (`gotrain bench gemm`) measured in between.
#
#   docs/bench/cnn_step_before_after.sh BASE_REV [ROUNDS] [BENCH_REGEX] [BENCHTIME]
#
# BENCH_REGEX defaults to 'CNNStepFused$|CNNStep$|MLPStep$' and BENCHTIME
# to 40x. Prints, per revision and benchmark, the best and median
# samples/s and samples/cpu-s over the rounds, then the bound
# (bound_samples_per_s, best of the rounds). Run from the repository root.
set -eu
BASE=${1:?usage: cnn_step_before_after.sh BASE_REV [ROUNDS] [BENCH_REGEX] [BENCHTIME]}
ROUNDS=${2:-5}
RE=${3:-'CNNStepFused$|CNNStep$|MLPStep$'}
BT=${4:-40x}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/base"
git archive "$BASE" | tar -x -C "$tmp/base"
(cd "$tmp/base" && go test -c -o "$tmp/before.test" ./tensor)
go test -c -o "$tmp/after.test" ./tensor
go build -o "$tmp/gotrain" ./cmd/gotrain
: >"$tmp/runs"
: >"$tmp/bound"
for r in $(seq "$ROUNDS"); do
	for b in before after; do
		GOMAXPROCS=1 GOTRAIN_NUM_THREADS=1 "$tmp/$b.test" -test.run XXX -test.bench "$RE" -test.benchtime "$BT" 2>&1 |
			awk -v b="$b" '/samples\/s/ {for (i = 1; i <= NF; i++) {if ($i == "samples/s") s = $(i-1); if ($i == "samples/cpu-s") c = $(i-1)}; print b, $1, s, c}' >>"$tmp/runs"
	done
	"$tmp/gotrain" bench gemm --threads 1 --min-time 300ms | awk -F'bound_samples_per_s=' 'NF > 1 {print $2}' >>"$tmp/bound"
done
for k in $(awk '{print $1 "|" $2}' "$tmp/runs" | sort -u); do
	b=${k%%|*}
	n=${k#*|}
	s=$(awk -v b="$b" -v n="$n" '$1 == b && $2 == n {print $3}' "$tmp/runs" | sort -n)
	c=$(awk -v b="$b" -v n="$n" '$1 == b && $2 == n {print $4}' "$tmp/runs" | sort -n)
	m=$(echo "$s" | wc -l)
	mid=$(((m + 1) / 2))
	printf '%-7s %-32s runs %d  samples/s best %7.1f median %7.1f  samples/cpu-s best %7.1f median %7.1f\n' "$b" "$n" "$m" \
		"$(echo "$s" | tail -1)" "$(echo "$s" | sed -n "${mid}p")" "$(echo "$c" | tail -1)" "$(echo "$c" | sed -n "${mid}p")"
done
echo "bound_samples_per_s best $(sort -n "$tmp/bound" | tail -1) (rounds: $(tr '\n' ' ' <"$tmp/bound"))"
