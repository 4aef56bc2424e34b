#!/bin/sh
# Sharded training, gotrain against PyTorch 2.15 on the same GPT (nanoGPT's
# architecture, the same recipe and data), world and machine: for each
# strategy gotrain's `train gpt --sharding` and
# jobs/gptjob/testdata/train_gpt_torch_sharded.py, one after the other:
#
#   ddp    gotrain --sharding none   PyTorch DistributedDataParallel
#   zero1  gotrain --sharding zero1  DDP + ZeroRedundancyOptimizer(AdamW)
#   zero2  gotrain --sharding zero2  FSDP2 fully_shard(reshard_after_forward=False)
#   full   gotrain --sharding full   FSDP2 fully_shard per block and root
#   full+ac  gotrain --sharding full --activation-checkpointing
#            FSDP2 fully_shard per block and root, each block's forward
#            under torch.utils.checkpoint.checkpoint(use_reentrant=False)
#   ddp+ac   gotrain --sharding none --activation-checkpointing
#            DistributedDataParallel, each block checkpointed the same way
#
# (activation checkpointing: each block keeps only its input and runs its
# forward again in its backward, on both sides; the PyTorch side is
# train_gpt_torch_sharded.py --activation-checkpointing).
# Every worker runs one thread (OMP_NUM_THREADS=1, GOTRAIN_NUM_THREADS=1).
# Each run's summary line is printed prefixed with its runner and
# strategy; then a table: tokens/s of each (all ranks' tokens over the
# steps after the first 5, evaluation excluded) and gotrain's ratio to
# PyTorch (above 1: gotrain faster), the largest rank's peak RSS of each
# and gotrain's ratio (below 1: gotrain smaller); then the CPU. gotrain's
# DDP summary has rank 0's peak RSS alone; every other run has every
# rank's. Run from any directory on an otherwise idle machine:
#
#   docs/bench/sharding_vs_torch2.sh            # 12x768, block 256, batch 4, 4 workers, 10 steps
#   LAYERS=1 WIDTH=64 HEADS=2 BLOCK=32 STEPS=2 NPROC=2 \
#     docs/bench/sharding_vs_torch2.sh          # a quick check that it works
#
# Settings: LAYERS WIDTH HEADS BLOCK BATCH NPROC STEPS, STRATEGIES
# (default "ddp zero1 zero2 full full+ac"; also ddp+ac), FSDP_API (2, or 1 for PyTorch's FSDP1
# wrapper with SHARD_GRAD_OP / FULL_SHARD per block; both run on CPU with
# gloo), TORCH_ENV (environment for the PyTorch runs only). PyTorch's
# peak RSS depends on glibc malloc, which keeps freed heap memory: in a
# check at 6x512 on 2 workers FSDP2's full sharding peaked above DDP by
# default and below it with TORCH_ENV=MALLOC_MMAP_THRESHOLD_=65536 (which
# returns the per-step gather buffers to the system, at some speed); the
# default runs PyTorch as installed. Summaries of PyTorch runs also give
# start_rss_mib, the RSS before the model is built (its libraries alone
# take hundreds of MiB). The Python is that of docs/bench/torch2_env.sh.
set -eu
cd "$(dirname "$0")/../.."
LAYERS=${LAYERS:-12} WIDTH=${WIDTH:-768} HEADS=${HEADS:-12} BLOCK=${BLOCK:-256}
BATCH=${BATCH:-4} NPROC=${NPROC:-4} STEPS=${STEPS:-10}
STRATEGIES=${STRATEGIES:-ddp zero1 zero2 full full+ac} FSDP_API=${FSDP_API:-2} TORCH_ENV=${TORCH_ENV:-}
for s in $STRATEGIES; do
	case $s in
	ddp | zero1 | zero2 | full | full+ac | ddp+ac) ;;
	*) echo "sharding_vs_torch2: STRATEGIES: unknown strategy $s (ddp, zero1, zero2, full, full+ac or ddp+ac)" >&2; exit 2 ;;
	esac
done
py=$(docs/bench/torch2_env.sh)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
PATH=/usr/local/go/bin:$PATH CGO_ENABLED=0 go build -o "$tmp/gotrain" ./cmd/gotrain
export OMP_NUM_THREADS=1 GOTRAIN_NUM_THREADS=1
model="--n-layer $LAYERS --n-embd $WIDTH --n-head $HEADS --block-size $BLOCK --batch-size $BATCH"
run="--max-steps $STEPS --eval-every $STEPS --eval-batches 1"

# split STRATEGY: sets s to its sharding and ac to its activation
# checkpointing flag ("full+ac": s=full ac=--activation-checkpointing).
split() {
	s=${1%+ac} ac=
	[ "$s" != "$1" ] && ac=--activation-checkpointing
	:
}
# gotrain STRATEGY: its summary line, or nothing (stderr in $tmp/err).
gotrain() {
	split "$1"
	[ "$s" = ddp ] && s=none
	# shellcheck disable=SC2086
	"$tmp/gotrain" train gpt $model $run --sample 0 --nproc-per-node "$NPROC" --sharding "$s" $ac \
		--progress=false --force 2>"$tmp/err" | tail -n 1
}
# torch STRATEGY: its summary line, or nothing (stderr in $tmp/err).
torch() {
	split "$1"
	# shellcheck disable=SC2086
	env $TORCH_ENV "$py" jobs/gptjob/testdata/train_gpt_torch_sharded.py $model $run --world "$NPROC" \
		--sharding "$s" $ac --fsdp-api "$FSDP_API" 2>"$tmp/err" | tail -n 1
}
# field LINE KEY: the value of KEY= in LINE.
field() { printf '%s\n' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
# peak LINE: the largest rank's peak RSS in MiB.
peak() {
	ranks=$(field "$1" peak_rss_mib_ranks)
	[ -n "$ranks" ] || ranks=$(field "$1" peak_rss_mib)
	printf '%s\n' "$ranks" | tr '/' '\n' | sort -n | tail -n 1
}
# ratio A B: A/B to two places, or - when either is missing or B is 0.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (a == "" || b == "" || b + 0 == 0) print "-"; else printf "%.2f\n", a / b }'; }

echo "GPT ${LAYERS}x${WIDTH}, ${HEADS} heads, block $BLOCK, batch $BATCH per worker, $NPROC workers, 1 thread each, $STEPS steps"
for s in $STRATEGIES; do
	for r in gotrain torch; do
		line=$($r "$s") || true
		if [ -z "$(field "$line" tokens_per_s)" ]; then
			echo "runner=$r strategy=$s failed: $(grep -v '^step ' "$tmp/err" | tail -n 1)"
			line=
		else
			echo "runner=$r strategy=$s $line"
		fi
		printf '%s\n' "$line" >"$tmp/$r.$s"
	done
done
echo
printf '%-8s %12s %12s %6s %12s %12s %6s\n' strategy gotrain_tok/s torch_tok/s ratio gotrain_mib torch_mib ratio
for s in $STRATEGIES; do
	g=$(cat "$tmp/gotrain.$s") t=$(cat "$tmp/torch.$s")
	gt=$(field "$g" tokens_per_s) tt=$(field "$t" tokens_per_s)
	gm=$(peak "$g") tm=$(peak "$t")
	printf '%-8s %12s %12s %6s %12s %12s %6s\n' "$s" "${gt:--}" "${tt:--}" "$(ratio "$gt" "$tt")" \
		"${gm:--}" "${tm:--}" "$(ratio "$gm" "$tm")"
done
echo "cpu: $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1)"
