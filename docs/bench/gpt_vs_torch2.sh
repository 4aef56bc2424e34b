#!/bin/sh
# The GPT job's tokens/s and peak RSS, gotrain against PyTorch 2.x eager
# and under torch.compile (and Debian's PyTorch 1.13 when /usr/bin/python3
# has it), one process and two DDP workers with one thread each, side by
# side in one run: the runners alternate within each round so that drift
# on a shared machine hits them alike. Run from the repository root on an
# otherwise idle machine:
#
#   [PRECISION=bf16] docs/bench/gpt_vs_torch2.sh [rounds (3)] [steps (60)] [-- gpt flags, e.g. --n-layer 12 --n-head 12 --n-embd 768 --block-size 256 --batch-size 4]
#
# PRECISION=bf16 runs gotrain with --precision bf16 and every PyTorch under
# torch.autocast('cpu', bfloat16); where gotrain has no bf16 kernel it
# refuses the flag, and a "note:" line says so with its reason.
#
# Every line is a job's summary prefixed with the round and the runner;
# tokens/s leaves out the first 5 steps (and so torch.compile's first
# compilation) and the evaluations in every runner. The last lines are
# each runner's median over the rounds and gotrain's ratio to the best
# PyTorch 2.x runner and to 1.13, then the precision and the CPU. PyTorch
# 1.13 runs on OpenBLAS under the OPENBLAS_CORETYPE (SkylakeX, Cooperlake,
# Zen, Haswell or unset) fastest in a 10-step run first.
set -eu
rounds=${1:-3}
steps=${2:-60}
[ $# -ge 2 ] && shift 2 || shift $#
[ "${1:-}" = "--" ] && shift
py2=$(docs/bench/torch2_env.sh)
bin=${TMPDIR:-/tmp}/gotrain-bench-gpt2
PATH=/usr/local/go/bin:$PATH CGO_ENABLED=0 go build -o "$bin" ./cmd/gotrain
precision=${PRECISION:-fp32}
case $precision in fp32 | bf16) ;; *) echo "gpt_vs_torch2: PRECISION=$precision: want fp32 or bf16" >&2; exit 2 ;; esac
flags="--max-steps $steps --eval-every 1000000 --eval-batches 1 --precision $precision $*"
torch() { # python, then script flags
	p=$1
	shift
	core=
	[ "$p" = /usr/bin/python3 ] && [ "$ct" != - ] && core=OPENBLAS_CORETYPE=$ct
	env -u OPENBLAS_CORETYPE OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 $core "$p" jobs/gptjob/testdata/train_gpt_torch.py $flags "$@" 2>/dev/null | tail -n 1
}
have113=false
/usr/bin/python3 -c "import torch" 2>/dev/null && have113=true
# Debian's PyTorch runs on OpenBLAS: under the fastest core type of a
# 10-step run (torch113_coretype.sh; "-" leaves OPENBLAS_CORETYPE unset).
ct=-
if $have113; then
	ct=$(docs/bench/torch113_coretype.sh tokens_per_s env OMP_NUM_THREADS=1 /usr/bin/python3 \
		jobs/gptjob/testdata/train_gpt_torch.py $flags --max-steps 10)
	echo "torch1.13 OPENBLAS_CORETYPE=$ct" >&2
fi
out=$(mktemp)
err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
for r in $(seq "$rounds"); do
	for w in 1 2; do
		g=$(GOTRAIN_NUM_THREADS=1 "$bin" train gpt $flags --progress=false --nproc-per-node $w 2>"$err" | tail -n 1) || true
		if [ -z "$g" ] && grep -q -- --precision "$err"; then
			echo "note: gotrain has no $precision path here: $(grep -m1 -- --precision "$err")"
		fi
		echo "round=$r world=$w runner=gotrain $g"
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
			if (med["torch1.13"] > 0 && med["gotrain"] > 0)
				printf "ratio world=%s gotrain/torch1.13=%.2f\n", w, med["gotrain"] / med["torch1.13"]
		}
	}' "$out"
echo "precision: $precision"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
