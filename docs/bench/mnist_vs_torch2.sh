#!/bin/sh
# The MNIST jobs, gotrain against PyTorch 2.x eager and torch.compile, side
# by side in one run: the MLP and the CNN, one process (each with its
# default threads: all cores) and 2 DDP workers on this machine (one
# thread each, as torchrun and gotrain run set them; PyTorch over gloo).
# Run from the repository root on an otherwise idle machine:
#
#   docs/bench/mnist_vs_torch2.sh [rounds (1)] [steps per rank (200)]
#
# Prints each run's samples/s, then per row the medians and gotrain's
# ratio to the best PyTorch variant, then the CPU. PyTorch counts from
# its 11th step; gotrain's summary counts every step, start-up included.
set -eu
rounds=${1:-1}
steps=${2:-200}
py2=$(docs/bench/torch2_env.sh)
bin=${TMPDIR:-/tmp}/gotrain-bench-mnist
PATH=/usr/local/go/bin:$PATH go build -o "$bin" ./cmd/gotrain
out=$(mktemp)
trap 'rm -f "$out"' EXIT
field() { tr ' ' '\n' | awk -F= -v k="$1" '$1 == k {print $2}' | tail -1; }
for r in $(seq "$rounds"); do
	for m in mlp cnn; do
		for w in 1 2; do
			g=$("$bin" train mnist --model "$m" --nproc-per-node "$w" --max-steps "$steps" 2>/dev/null | field samples_per_s)
			thr=1
			[ "$w" = 1 ] && thr=$(nproc)
			e=$(OMP_NUM_THREADS=$thr "$py2" jobs/mnistjob/testdata/train_mnist_torch.py --model "$m" --world "$w" --max-steps "$steps" 2>/dev/null | field samples_per_s)
			c=$(OMP_NUM_THREADS=$thr "$py2" jobs/mnistjob/testdata/train_mnist_torch.py --model "$m" --world "$w" --max-steps "$steps" --compile 2>/dev/null | field samples_per_s)
			echo "round=$r model=$m world=$w gotrain=$g torch2_eager=${e:-failed} torch2_compile=${c:-failed}"
		done
	done
done | tee "$out"
awk '
	{ for (i = 1; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
	  k = f["model"] " world=" f["world"]; if (!(k in n)) order[++rows] = k
	  n[k]++; g[k, n[k]] = f["gotrain"]; e[k, n[k]] = f["torch2_eager"]; c[k, n[k]] = f["torch2_compile"] }
	function median(a, k, cnt,   i, j, x, s) {
		for (i = 1; i <= cnt; i++) s[i] = a[k, i] + 0
		for (i = 1; i <= cnt; i++) for (j = i + 1; j <= cnt; j++) if (s[j] < s[i]) { x = s[i]; s[i] = s[j]; s[j] = x }
		return cnt % 2 ? s[(cnt + 1) / 2] : (s[cnt / 2] + s[cnt / 2 + 1]) / 2
	}
	END {
		printf "%-14s %10s %12s %14s %10s\n", "row", "gotrain", "torch2_eager", "torch2_compile", "ratio"
		for (r = 1; r <= rows; r++) {
			k = order[r]; mg = median(g, k, n[k]); me = median(e, k, n[k]); mc = median(c, k, n[k])
			best = me > mc ? me : mc
			printf "%-14s %10.0f %12.0f %14.0f %9.2fx\n", k, mg, me, mc, (best > 0 ? mg / best : 0)
		}
	}' "$out"
echo "cpu: $(lscpu | awk -F: '/Model name/ {gsub(/^ +/, "", $2); print $2; exit}')"
