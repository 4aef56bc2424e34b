#!/bin/sh
# ab_step_bench.sh BASE [ROUNDS] [N]: times the default GPT's whole
# training step (BenchmarkGPTTrainStep: forward, backward, clipping,
# AdamW; batch 32, one thread) of commit BASE against the working tree,
# alternating the two test binaries ROUNDS times (default 3), N steps each
# (default 15). BASE is built with this tree's benchmark files, so both
# report tokens/s, cpu-tokens/s and cpu-ms/op (CPU time, which moves much
# less than wall time on a shared machine). Run from anywhere in the
# repository.
set -eu
base=${1:?usage: ab_step_bench.sh BASE [ROUNDS] [N]}
rounds=${2:-3}
n=${3:-15}
root=$(git rev-parse --show-toplevel)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git -C "$root" archive "$base" | tar -x -C "$work"
cp "$root"/nn/models/bench_test.go "$root"/nn/models/cputime_*_test.go "$work/nn/models/"
(cd "$work" && go test -c -o "$work/base.test" ./nn/models)
(cd "$root" && go test -c -o "$work/head.test" ./nn/models)
cd "$root/nn/models"
i=0
while [ "$i" -lt "$rounds" ]; do
	for v in base head; do
		printf '%s ' "$v"
		GOMAXPROCS=1 GOTRAIN_NUM_THREADS=1 "$work/$v.test" -test.run '^$' -test.bench 'GPTTrainStep$' -test.benchtime "${n}x" | grep '^Benchmark'
	done
	i=$((i + 1))
done
