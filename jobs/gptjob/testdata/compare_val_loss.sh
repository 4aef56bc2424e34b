#!/bin/sh
# The validation loss of the default GPT job after the same steps, config
# and seed policy (each framework initialises and shuffles from its own
# seed 1), gotrain against PyTorch 1.13, and their relative difference.
# Run from the repository root:
#
#   jobs/gptjob/testdata/compare_val_loss.sh [steps (1000)] [workers (1)]
#
# With a third argument "same-init", both start from the same weights
# (PyTorch's, written by gen_parity.py), which leaves only the batches'
# order and float rounding to differ. gotrain's sample is printed too.
set -eu
steps=${1:-1000}
world=${2:-1}
bin=${TMPDIR:-/tmp}/gotrain-val-gpt
PATH=/usr/local/go/bin:$PATH go build -o "$bin" ./cmd/gotrain
init=""
if [ "${3:-}" = same-init ]; then
	init="--init jobs/gptjob/testdata/parity_init.safetensors"
fi
g=$("$bin" train gpt --max-steps "$steps" --nproc-per-node "$world" --progress=false --sample 300 $init 2>/dev/null)
echo "$g"
if [ "$world" -gt 1 ]; then w="--world $world"; else w=""; fi
p=$(env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 /usr/bin/python3 jobs/gptjob/testdata/train_gpt_torch.py --max-steps "$steps" $w $init 2>/dev/null | tail -n 1)
echo "pytorch: $p"
gv=$(echo "$g" | tail -n 1 | sed 's/.*val_loss=\([0-9.]*\).*/\1/')
pv=$(echo "$p" | sed 's/.*val_loss=\([0-9.]*\).*/\1/')
echo "val_loss gotrain=$gv pytorch=$pv" | awk -v g="$gv" -v p="$pv" '{ d = (g - p) / p; printf "%s relative_difference=%+.4f within_2pct=%s\n", $0, d, (d < 0.02 && d > -0.02) ? "yes" : "no" }'
