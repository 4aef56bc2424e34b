#!/bin/sh
# One thread's training step of the MNIST MLP and CNN (batch 64, no data
# loading), gotrain's against PyTorch 2.x's, alternating round by round
# so that drift on a shared machine hits both alike. Run from the
# repository root on an otherwise idle machine:
#
#   docs/bench/steps_vs_torch2.sh [rounds (3)] [fp32|bf16]
#
# Prints every round's samples/s, then each model's medians and
# gotrain's ratio, then the CPU. bf16 needs the bf16 kernel (gotrain
# refuses it elsewhere; PyTorch runs oneDNN's where the CPU has it).
set -eu
rounds=${1:-3}
precision=${2:-fp32}
py2=$(docs/bench/torch2_env.sh)
test=${TMPDIR:-/tmp}/gotrain-bench-steps.test
PATH=/usr/local/go/bin:$PATH go test -c -o "$test" ./tensor
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for r in $(seq "$rounds"); do
	for m in mlp cnn; do
		case $m/$precision in
		mlp/fp32) b='MLPStep$' ;;
		cnn/fp32) b='CNNStepFused$' ;;
		mlp/bf16) b='MLPStepBF16$' ;;
		cnn/bf16) b='CNNStepFusedBF16$' ;;
		esac
		n=200
		[ $m = cnn ] && n=20
		g=$(GOMAXPROCS=1 GOTRAIN_NUM_THREADS=1 "$test" -test.run '^$' -test.bench "$b" -test.benchtime ${n}x |
			awk '/^Benchmark/ {for (i = 1; i <= NF; i++) if ($i == "samples/s") print $(i-1)}')
		t=$(OMP_NUM_THREADS=1 "$py2" tensor/testdata/torch_step_bench.py $m 1 $n "$precision" 2>/dev/null |
			tr ' ' '\n' | awk -F= '$1 == "samples/s" {print $2}')
		echo "round=$r model=$m precision=$precision gotrain_samples_per_s=$g torch2_samples_per_s=$t"
	done
done | tee "$out"
awk '
	{ for (i = 1; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
	  m = f["model"]; n[m]++; g[m, n[m]] = f["gotrain_samples_per_s"]; t[m, n[m]] = f["torch2_samples_per_s"] }
	function median(a, m, c,   i, j, x, s) {
		for (i = 1; i <= c; i++) s[i] = a[m, i] + 0
		for (i = 1; i <= c; i++) for (j = i + 1; j <= c; j++) if (s[j] < s[i]) { x = s[i]; s[i] = s[j]; s[j] = x }
		return c % 2 ? s[(c + 1) / 2] : (s[c / 2] + s[c / 2 + 1]) / 2
	}
	END { for (m in n) { gm = median(g, m, n[m]); tm = median(t, m, n[m])
		printf "median model=%s gotrain_samples_per_s=%.0f torch2_samples_per_s=%.0f ratio=%.2f\n", m, gm, tm, (tm > 0 ? gm / tm : 0) } }' "$out"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
