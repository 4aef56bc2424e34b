#!/bin/sh
# The GPT job's tokens/s and peak RSS, gotrain against PyTorch 2.x eager
# and under torch.compile (and Debian's PyTorch 1.13 when /usr/bin/python3
# has it), one process and two DDP workers with one thread each, side by
# side in one run: the runners alternate within each round so that drift
# on a shared machine hits them alike. Run from the repository root on an
# otherwise idle machine:
#
#   docs/bench/gpt_vs_torch2.sh [rounds (3)] [steps (60)] [-- gpt flags, e.g. --n-layer 12 --n-head 12 --n-embd 768 --block-size 256 --batch-size 4]
#
# Every line is a job's summary prefixed with the round and the runner;
# tokens/s leaves out the first 5 steps (and so torch.compile's first
# compilation) and the evaluations in every runner. The last lines are
# each runner's median over the rounds and gotrain's ratio to the best
# PyTorch 2.x runner, then the CPU.
set -eu
rounds=${1:-3}
steps=${2:-60}
[ $# -ge 2 ] && shift 2 || shift $#
[ "${1:-}" = "--" ] && shift
py2=$(docs/bench/torch2_env.sh)
bin=${TMPDIR:-/tmp}/gotrain-bench-gpt2
PATH=/usr/local/go/bin:$PATH CGO_ENABLED=0 go build -o "$bin" ./cmd/gotrain
flags="--max-steps $steps --eval-every 1000000 --eval-batches 1 $*"
torch() { # python, then script flags
	p=$1
	shift
	env OMP_NUM_THREADS=1 "$p" jobs/gptjob/testdata/train_gpt_torch.py $flags "$@" 2>/dev/null | tail -n 1
}
have113=false
/usr/bin/python3 -c "import torch" 2>/dev/null && have113=true
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for r in $(seq "$rounds"); do
	for w in 1 2; do
		echo "round=$r world=$w runner=gotrain $(GOTRAIN_NUM_THREADS=1 "$bin" train gpt $flags --progress=false --nproc-per-node $w 2>/dev/null | tail -n 1)"
		echo "round=$r world=$w runner=torch2-eager $(torch "$py2" --world $w)"
		echo "round=$r world=$w runner=torch2-compile $(torch "$py2" --world $w --compile)"
		if $have113; then
			echo "round=$r world=$w runner=torch1.13 $(torch /usr/bin/python3 --world $w)"
		fi
	done
done | tee "$out"
# Medians per world and runner, and gotrain's ratio to the best PyTorch 2.x.
awk '
	{ w = ""; r = ""; t = ""; m = ""
	  for (i = 1; i <= NF; i++) {
		split($i, kv, "=")
		if (kv[1] == "world") w = kv[2]; else if (kv[1] == "runner") r = kv[2]
		else if (kv[1] == "tokens_per_s") t = kv[2]; else if (kv[1] == "peak_rss_mib") m = kv[2]
	  }
	  if (t != "") { k = w SUBSEP r; n[k]++; tv[k, n[k]] = t; mv[k, n[k]] = m; seen[w] = 1; runners[r] = 1 } }
	function median(a, k, c,   i, j, x, s) {
		for (i = 1; i <= c; i++) s[i] = a[k, i] + 0
		for (i = 1; i <= c; i++) for (j = i + 1; j <= c; j++) if (s[j] < s[i]) { x = s[i]; s[i] = s[j]; s[j] = x }
		return c % 2 ? s[(c + 1) / 2] : (s[c / 2] + s[c / 2 + 1]) / 2
	}
	END {
		for (w in seen) {
			best = 0
			for (r in runners) {
				k = w SUBSEP r
				if (!n[k]) continue
				med[r] = median(tv, k, n[k])
				printf "median world=%s runner=%s tokens_per_s=%.0f peak_rss_mib=%.0f rounds=%d\n", w, r, med[r], median(mv, k, n[k]), n[k]
				if (r ~ /^torch2/ && med[r] > best) { best = med[r]; bestr = r }
			}
			if (best > 0 && med["gotrain"] > 0)
				printf "ratio world=%s gotrain/%s=%.2f\n", w, bestr, med["gotrain"] / best
		}
	}' "$out"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
