#!/bin/sh
# Sharded training against DDP: the GPT (12 layers × 768 wide, block 256,
# batch 4 per worker, AdamW) on 4 local workers with --sharding none
# (DDP), zero1, zero2 and full. For each strategy it prints tokens/s,
# each rank's peak RSS (the summary's peak_rss_mib_ranks; DDP's summary
# has rank 0's alone) and both as ratios to DDP; then, per strategy, the
# largest --n-layer at width 768 whose ranks all peak within a memory
# budget, by binary search over short runs. The budget is checked on the
# measured peak RSS of each run, not enforced (a cgroup would need root);
# a run that fails, out of memory or otherwise, counts as not fitting.
#
#   docs/bench/sharding.sh                     # the full runs (hours on 2 cores)
#   LAYERS=1 WIDTH=32 HEADS=2 BLOCK=16 STEPS=2 MAX_LAYERS=4 BUDGET_MIB=200 \
#     docs/bench/sharding.sh                   # a quick check that it works
#
# Settings: LAYERS WIDTH HEADS BLOCK BATCH NPROC STEPS (the timed runs),
# BUDGET_MIB (default 2048 per rank), MAX_LAYERS (search ceiling,
# default 96), FIT_STEPS (steps of each search run, default 2),
# STRATEGIES (default "none zero1 zero2 full").
set -eu
cd "$(dirname "$0")/../.."
LAYERS=${LAYERS:-12} WIDTH=${WIDTH:-768} HEADS=${HEADS:-12} BLOCK=${BLOCK:-256}
BATCH=${BATCH:-4} NPROC=${NPROC:-4} STEPS=${STEPS:-20}
BUDGET_MIB=${BUDGET_MIB:-2048} MAX_LAYERS=${MAX_LAYERS:-96} FIT_STEPS=${FIT_STEPS:-2}
STRATEGIES=${STRATEGIES:-none zero1 zero2 full}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/gotrain" ./cmd/gotrain

# run STRATEGY LAYERS STEPS: one training; prints its summary line.
run() {
	"$tmp/gotrain" train gpt --n-layer "$2" --n-embd "$WIDTH" --n-head "$HEADS" --block-size "$BLOCK" \
		--batch-size "$BATCH" --max-steps "$3" --eval-every "$3" --eval-batches 1 --sample 0 \
		--nproc-per-node "$NPROC" --sharding "$1" --progress=false --force 2>"$tmp/err" | tail -n 1
}
# field LINE KEY: the value of KEY= in LINE.
field() { printf '%s\n' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
# peak LINE: the largest rank's peak RSS in MiB.
peak() {
	ranks=$(field "$1" peak_rss_mib_ranks)
	[ -n "$ranks" ] || ranks=$(field "$1" peak_rss_mib)
	printf '%s\n' "$ranks" | tr '/' '\n' | sort -n | tail -n 1
}

echo "GPT ${LAYERS}x${WIDTH}, block $BLOCK, batch $BATCH, $NPROC workers, $STEPS steps"
printf '%-8s %12s %10s %10s  %s\n' strategy tokens/s tok_vs_ddp rss_vs_ddp peak_rss_mib_ranks
ddp_tok= ddp_rss=
for s in $STRATEGIES; do
	line=$(run "$s" "$LAYERS" "$STEPS") || { echo "$s: failed: $(tail -n 1 "$tmp/err")"; continue; }
	tok=$(field "$line" tokens_per_s) rss=$(peak "$line")
	ranks=$(field "$line" peak_rss_mib_ranks)
	[ -n "$ranks" ] || ranks="rank0=$(field "$line" peak_rss_mib)"
	if [ "$s" = none ]; then ddp_tok=$tok ddp_rss=$rss; fi
	if [ -n "$ddp_tok" ]; then
		rt=$(awk -v a="$tok" -v b="$ddp_tok" 'BEGIN{printf "%.2f", a/b}')
		rr=$(awk -v a="$rss" -v b="$ddp_rss" 'BEGIN{printf "%.2f", a/b}')
	else
		rt=- rr=-
	fi
	printf '%-8s %12s %10s %10s  %s\n' "$s" "$tok" "$rt" "$rr" "$ranks"
done

echo "largest --n-layer at width $WIDTH within $BUDGET_MIB MiB per rank:"
for s in $STRATEGIES; do
	lo=0 hi=$MAX_LAYERS
	while [ "$lo" -lt "$hi" ]; do
		mid=$(((lo + hi + 1) / 2))
		if line=$(run "$s" "$mid" "$FIT_STEPS") && [ -n "$line" ] && [ "$(peak "$line")" -le "$BUDGET_MIB" ]; then
			lo=$mid
		else
			hi=$((mid - 1))
		fi
	done
	printf '%-8s %d\n' "$s" "$lo"
done
