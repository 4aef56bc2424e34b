#!/bin/sh
# Tokens/s and peak RSS of the default GPT, gotrain against PyTorch 1.13,
# side by side in one run: one process with one thread, and two DDP
# workers with one thread each, alternating within each round so that
# drift on a shared machine hits all four alike. Run from the repository
# root on a quiet machine:
#
#   jobs/gptjob/testdata/bench_gpt.sh [rounds (3)] [steps (60)] [OPENBLAS_CORETYPE]
#
# Pick OPENBLAS_CORETYPE as DESIGN.md says (try SkylakeX, Cooperlake, Zen,
# Haswell and none; keep PyTorch's fastest). Every line is a job's
# summary prefixed with the round and the runner; tokens/s excludes the
# first 5 steps and the final evaluation in both.
set -eu
rounds=${1:-3}
steps=${2:-60}
core=${3:-}
bin=${TMPDIR:-/tmp}/gotrain-bench-gpt
PATH=/usr/local/go/bin:$PATH go build -o "$bin" ./cmd/gotrain
flags="--max-steps $steps --eval-every 1000000 --eval-batches 1"
torch() {
	env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ${core:+OPENBLAS_CORETYPE=$core} \
		/usr/bin/python3 jobs/gptjob/testdata/train_gpt_torch.py $flags "$@" 2>/dev/null | tail -n 1
}
for r in $(seq "$rounds"); do
	echo "round=$r runner=gotrain $(GOTRAIN_NUM_THREADS=1 "$bin" train gpt $flags --progress=false 2>/dev/null | tail -n 1)"
	echo "round=$r runner=pytorch $(torch)"
	echo "round=$r runner=pytorch $(torch --world 2)"
	echo "round=$r runner=gotrain $("$bin" train gpt $flags --progress=false --nproc-per-node 2 2>/dev/null | tail -n 1)"
done
