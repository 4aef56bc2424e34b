#!/bin/sh
# ResNet-18 training steps (CIFAR stem, 32×32 images, 10 classes, SGD with
# momentum), gotrain against PyTorch 2.x eager (torchvision's resnet18 with
# the same stem) on the same shapes, side by side in one run, at 1 and 2
# threads (GOTRAIN_NUM_THREADS for gotrain, torch.set_num_threads for
# PyTorch). A third column is Debian's PyTorch 1.13 (/usr/bin/python3,
# python3-torch and python3-torchvision, on OpenBLAS) when it is
# installed: each round runs it under OPENBLAS_CORETYPE SkylakeX,
# Cooperlake, Zen, Haswell and unset and keeps the fastest. Run from the
# repository root on an otherwise idle machine:
#
#   docs/bench/resnet_vs_torch2.sh [rounds (1)] [steps (10)] [batch (128)]
#
# Prints each run's images/s, then per thread count the medians and
# gotrain's ratios to PyTorch 2.x and 1.13, then the CPU. Both count steps after 2
# warm-up steps. Installs torchvision into the venv of torch2_env.sh if it
# is missing.
set -eu
rounds=${1:-1}
steps=${2:-10}
batch=${3:-128}
py2=$(docs/bench/torch2_env.sh)
if ! "$py2" -c "import torchvision" 2>/dev/null; then
	echo "resnet_vs_torch2: installing torchvision into $(dirname "$py2")/.." >&2
	"$(dirname "$py2")/pip" install --quiet "torchvision==0.29.*" >&2
fi
bin=${TMPDIR:-/tmp}/gotrain-bench-resnet.test
PATH=/usr/local/go/bin:$PATH go test -c -o "$bin" ./nn/models
out=$(mktemp)
trap 'rm -f "$out"' EXIT
field() { tr ' \t' '\n\n' | awk -F= -v k="$1" '$1 == k {print $2}' | tail -1; }
for r in $(seq "$rounds"); do
	for t in 1 2; do
		# The benchmark prints "... <value> images/s ...": take that value.
		g=$(cd nn/models && GOTRAIN_NUM_THREADS=$t GOTRAIN_BENCH_BATCH=$batch "$bin" -test.run '^$' \
			-test.bench '^BenchmarkResNet18Step$' -test.benchtime "${steps}x" 2>/dev/null |
			awk '/^BenchmarkResNet18Step/ { for (i = 2; i <= NF; i++) if ($i == "images/s") print $(i-1) }')
		e=$(OMP_NUM_THREADS=$t "$py2" nn/models/testdata/torch_resnet_step_bench.py "$t" "$steps" "$batch" 2>/dev/null | field images_per_s)
		# Debian's PyTorch 1.13: the fastest OpenBLAS core type ("-" for
		# unset), or "none" if it is not installed.
		d=none
		if /usr/bin/python3 -c "import torch, torchvision" 2>/dev/null; then
			d=failed
			for ct in SkylakeX Cooperlake Zen Haswell -; do
				v=$(if [ "$ct" = - ]; then unset OPENBLAS_CORETYPE; else export OPENBLAS_CORETYPE=$ct; fi
					OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t /usr/bin/python3 nn/models/testdata/torch_resnet_step_bench.py "$t" "$steps" "$batch" 2>/dev/null | field images_per_s)
				if [ -n "$v" ] && { [ "$d" = failed ] || awk -v a="$v" -v b="${d%%@*}" 'BEGIN { exit !(a > b) }'; }; then
					d="$v@$ct"
				fi
			done
		fi
		echo "round=$r threads=$t batch=$batch gotrain=${g:-failed} torch2_eager=${e:-failed} torch113_eager=${d%%@*} torch113_coretype=${d#*@}"
	done
done | tee "$out"
awk '
	{ for (i = 1; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
	  k = "threads=" f["threads"]; if (!(k in n)) order[++rows] = k
	  n[k]++; g[k, n[k]] = f["gotrain"]; e[k, n[k]] = f["torch2_eager"]; d[k, n[k]] = f["torch113_eager"] }
	function median(a, k, cnt,   i, j, x, s) {
		for (i = 1; i <= cnt; i++) s[i] = a[k, i] + 0
		for (i = 1; i <= cnt; i++) for (j = i + 1; j <= cnt; j++) if (s[j] < s[i]) { x = s[i]; s[i] = s[j]; s[j] = x }
		return cnt % 2 ? s[(cnt + 1) / 2] : (s[cnt / 2] + s[cnt / 2 + 1]) / 2
	}
	END {
		printf "%-10s %14s %14s %8s %16s %8s\n", "row", "gotrain img/s", "torch2 img/s", "ratio", "torch1.13 img/s", "ratio"
		for (r = 1; r <= rows; r++) {
			k = order[r]; mg = median(g, k, n[k]); me = median(e, k, n[k]); md = median(d, k, n[k])
			printf "%-10s %14.1f %14.1f %7.2fx %16.1f %7.2fx\n", k, mg, me, (me > 0 ? mg / me : 0), md, (md > 0 ? mg / md : 0)
		}
	}' "$out"
echo "cpu: $(lscpu | awk -F: '/Model name/ {gsub(/^ +/, "", $2); print $2; exit}')"
