#!/bin/sh
# Sharded training against DDP, by memory: the GPT (12 layers × 768 wide,
# 12 heads, byte vocabulary, block 256, batch 4 per worker, AdamW) on 4
# local workers, one thread each.
#
#   docs/bench/sharding.sh ratio   # each strategy's peak RSS per rank, and its ratio to DDP's
#   docs/bench/sharding.sh fit     # the largest --n-layer at width 768 within a total RSS budget
#
# ratio runs each of STRATEGIES for STEPS steps and prints tokens/s, the
# largest rank's peak RSS, both as ratios to DDP, and every rank's peak
# (the summary's peak_rss_mib_ranks; DDP's summary has rank 0's alone,
# the rank that also evaluates, and counts for all). A strategy
# "full+ac" is full with --activation-checkpointing.
#
# fit finds, for each of FIT_STRATEGIES, the largest --n-layer whose
# workers together peak within BUDGET_MIB (default 20 GiB for the 4
# workers), by bisection over real runs of FIT_STEPS steps, and prints
# it with its parameter count and the ratio to DDP's. The budget is
# checked on the measured peak RSS of each run, not enforced (a cgroup
# would need root); a run that fails, out of memory or otherwise, counts
# as not fitting. The runs at the top of the search come close to the
# budget: run it on a machine with that much memory free.
#
#   # a quick check that it works (seconds, not the measurement):
#   LAYERS=1 WIDTH=32 HEADS=2 BLOCK=16 STEPS=2 docs/bench/sharding.sh ratio
#   WIDTH=32 HEADS=2 BLOCK=16 FIT_STEPS=1 MAX_LAYERS=8 BUDGET_MIB=700 docs/bench/sharding.sh fit
#
# Settings: LAYERS WIDTH HEADS BLOCK BATCH NPROC STEPS, STRATEGIES
# (default "none zero1 zero2 full full+ac"), BUDGET_MIB (default 20480,
# all workers together), MAX_LAYERS (search ceiling, default 256),
# FIT_STEPS (default 2), FIT_STRATEGIES (default "none none+ac full
# full+ac").
set -eu
cd "$(dirname "$0")/../.."
MODE=${1:-ratio}
LAYERS=${LAYERS:-12} WIDTH=${WIDTH:-768} HEADS=${HEADS:-12} BLOCK=${BLOCK:-256}
BATCH=${BATCH:-4} NPROC=${NPROC:-4} STEPS=${STEPS:-6}
BUDGET_MIB=${BUDGET_MIB:-20480} MAX_LAYERS=${MAX_LAYERS:-256} FIT_STEPS=${FIT_STEPS:-2}
STRATEGIES=${STRATEGIES:-none zero1 zero2 full full+ac}
FIT_STRATEGIES=${FIT_STRATEGIES:-none none+ac full full+ac}
case $MODE in ratio | fit) ;; *)
	echo "sharding.sh: unknown mode $MODE (want ratio or fit)" >&2
	exit 2
	;;
esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/gotrain" ./cmd/gotrain

# run STRATEGY[+ac] LAYERS STEPS: one training; prints its summary line.
run() {
	s=${1%+ac} ac=
	[ "$s" = "$1" ] || ac=--activation-checkpointing
	GOTRAIN_NUM_THREADS=1 OMP_NUM_THREADS=1 "$tmp/gotrain" train gpt --n-layer "$2" --n-embd "$WIDTH" --n-head "$HEADS" \
		--block-size "$BLOCK" --batch-size "$BATCH" --max-steps "$3" --eval-every "$3" --eval-batches 1 --sample 0 \
		--nproc-per-node "$NPROC" --sharding "$s" $ac --progress=false --force 2>"$tmp/err" | tail -n 1
}
# field LINE KEY: the value of KEY= in LINE.
field() { printf '%s\n' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
# ranks LINE: every rank's peak RSS in MiB, one a line (DDP: rank 0's for each).
ranks() {
	r=$(field "$1" peak_rss_mib_ranks)
	if [ -n "$r" ]; then
		printf '%s\n' "$r" | tr '/' '\n'
	else
		v=$(field "$1" peak_rss_mib)
		i=0
		while [ "$i" -lt "$NPROC" ]; do
			echo "$v"
			i=$((i + 1))
		done
	fi
}
peak() { ranks "$1" | sort -n | tail -n 1; }
total() { ranks "$1" | awk '{s += $1} END {print s}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{if (b > 0) printf "%.2f", a/b; else print "-"}'; }
# params L: the model's parameter count (byte vocabulary, tied lm_head).
params() { awk -v L="$1" -v C="$WIDTH" -v T="$BLOCK" 'BEGIN{printf "%.1fM", (256*C + T*C + L*(12*C*C + 13*C) + 2*C)/1e6}'; }

if [ "$MODE" = ratio ]; then
	echo "GPT ${LAYERS}x${WIDTH}, block $BLOCK, batch $BATCH, $NPROC workers, $STEPS steps"
	printf '%-9s %10s %10s %9s %10s  %s\n' strategy tokens/s tok_vs_ddp peak_mib rss_vs_ddp peak_rss_mib_ranks
	ddp_tok= ddp_rss=
	for s in $STRATEGIES; do
		line=$(run "$s" "$LAYERS" "$STEPS") && [ -n "$line" ] || {
			echo "$s: failed: $(tail -n 1 "$tmp/err")"
			continue
		}
		tok=$(field "$line" tokens_per_s) rss=$(peak "$line")
		if [ "$s" = none ]; then ddp_tok=$tok ddp_rss=$rss; fi
		rt=- rr=-
		if [ -n "$ddp_tok" ]; then rt=$(ratio "$tok" "$ddp_tok") rr=$(ratio "$rss" "$ddp_rss"); fi
		printf '%-9s %10s %10s %9s %10s  %s\n' "$s" "$tok" "$rt" "$rss" "$rr" "$(ranks "$line" | paste -sd/)"
	done
	exit 0
fi

echo "largest --n-layer at width $WIDTH (block $BLOCK, batch $BATCH, $NPROC workers, $FIT_STEPS steps) within $BUDGET_MIB MiB in total:"
printf '%-9s %8s %10s %10s %10s\n' strategy n_layer params total_mib vs_ddp
ddp_fit=
for s in $FIT_STRATEGIES; do
	lo=0 hi=$MAX_LAYERS best=-
	while [ "$lo" -lt "$hi" ]; do
		mid=$(((lo + hi + 1) / 2))
		if line=$(run "$s" "$mid" "$FIT_STEPS") && [ -n "$line" ] && [ "$(total "$line")" -le "$BUDGET_MIB" ]; then
			lo=$mid best=$(total "$line")
		else
			hi=$((mid - 1))
		fi
	done
	if [ "$s" = none ]; then ddp_fit=$lo; fi
	vs=-
	if [ -n "$ddp_fit" ]; then vs=$(ratio "$lo" "$ddp_fit"); fi
	printf '%-9s %8d %10s %10s %10s\n' "$s" "$lo" "$(params "$lo")" "$best" "$vs"
done
