#!/bin/sh
# The training steps and the allreduce at a base revision and at the work
# tree, run alternately round by round so that drift on a shared machine
# hits both alike: the MLP and CNN steps (package tensor) and the GPT step
# (package nn/models) on one thread, and `gotrain bench allreduce` with 2
# local workers.
#
#   docs/bench/before_after.sh BASE_REV [ROUNDS]
#
# Prints, per revision and benchmark, the median and best of the rounds
# (samples/s, tokens/s, busbw GB/s), then the CPU. Run from the
# repository root on an otherwise idle machine.
set -eu
BASE=${1:?usage: before_after.sh BASE_REV [ROUNDS]}
ROUNDS=${2:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/base"
git archive "$BASE" | tar -x -C "$tmp/base"
build() { # dir tag
	(cd "$1" && go test -c -o "$tmp/$2-tensor.test" ./tensor &&
		go test -c -o "$tmp/$2-models.test" ./nn/models &&
		CGO_ENABLED=0 go build -o "$tmp/$2-gotrain" ./cmd/gotrain)
}
build "$tmp/base" before
build . after
: >"$tmp/runs"
metric() { # tag name unit: the value before unit on each benchmark line
	awk -v b="$1" -v u="$2" '/^Benchmark/ {for (i = 1; i <= NF; i++) if ($i == u) print b, $1, $(i-1)}'
}
for r in $(seq "$ROUNDS"); do
	for b in before after; do
		GOMAXPROCS=1 GOTRAIN_NUM_THREADS=1 "$tmp/$b-tensor.test" -test.run XXX \
			-test.bench 'MLPStep$|CNNStepFused$' -test.benchtime 40x 2>&1 | metric "$b" samples/s >>"$tmp/runs"
		GOMAXPROCS=1 GOTRAIN_NUM_THREADS=1 "$tmp/$b-models.test" -test.run XXX \
			-test.bench 'BenchmarkGPTStep$' -test.benchtime 10x 2>&1 | metric "$b" tokens/s >>"$tmp/runs"
		"$tmp/$b-gotrain" bench allreduce --nproc 2 --sizes 1048576,67108864 2>&1 |
			awk -v b="$b" -F'[ =]' '/^op=allreduce/ {for (i = 1; i < NF; i++) {if ($i == "bytes") n = $(i+1); if ($i == "busbw_GBps") v = $(i+1)}; print b, "allreduce_" n "_busbw_GBps", v}' >>"$tmp/runs"
	done
done
for k in $(awk '{print $2 "|" $1}' "$tmp/runs" | sort -u); do
	n=${k%%|*}
	b=${k#*|}
	s=$(awk -v b="$b" -v n="$n" '$1 == b && $2 == n {print $3}' "$tmp/runs" | sort -g)
	m=$(echo "$s" | wc -l)
	printf '%-36s %-7s runs %d  median %10s  best %10s\n' "$n" "$b" "$m" "$(echo "$s" | sed -n "$(((m + 1) / 2))p")" "$(echo "$s" | tail -1)"
done
echo "cpu: $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)"
