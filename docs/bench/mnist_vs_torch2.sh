#!/bin/sh
# The MNIST jobs, gotrain against PyTorch 2.x eager and torch.compile, and
# Debian's PyTorch 1.13 eager when /usr/bin/python3 has torch, side by side
# in one run: the MLP and the CNN, one process (each with its default
# threads: all cores) and 2 DDP workers on this machine (one thread each,
# as torchrun and gotrain run set them; PyTorch over gloo). Run from the
# repository root on an otherwise idle machine:
#
#   [PRECISION=bf16] docs/bench/mnist_vs_torch2.sh [rounds (1)] [steps per rank (200)] [OPENBLAS_CORETYPE]
#
# PRECISION=bf16 runs gotrain with --precision bf16 and PyTorch under
# torch.autocast('cpu', bfloat16); where gotrain has no bf16 kernel it
# refuses the flag, and its column says no-bf16 (the reason follows).
# PyTorch 1.13 runs on OpenBLAS: each model first times OPENBLAS_CORETYPE
# SkylakeX, Cooperlake, Zen, Haswell and unset at 30 steps and keeps the
# fastest, unless the third argument names one ("-" for unset).
#
# Prints each run's samples/s, then per row the medians and gotrain's
# ratio to the best PyTorch 2.x variant and to 1.13, then the CPU. PyTorch
# counts from its 11th step; gotrain's summary counts every step,
# start-up included.
set -eu
rounds=${1:-1}
steps=${2:-200}
coretype=${3:-}
precision=${PRECISION:-fp32}
case $precision in fp32 | bf16) ;; *) echo "mnist_vs_torch2: PRECISION=$precision: want fp32 or bf16" >&2; exit 2 ;; esac
py2=$(docs/bench/torch2_env.sh)
bin=${TMPDIR:-/tmp}/gotrain-bench-mnist
PATH=/usr/local/go/bin:$PATH CGO_ENABLED=0 go build -o "$bin" ./cmd/gotrain
script=jobs/mnistjob/testdata/train_mnist_torch.py
have113=false
/usr/bin/python3 -c "import torch" 2>/dev/null && have113=true
out=$(mktemp)
err=$(mktemp)
trap 'rm -f "$out" "$err" "$err.ct"' EXIT
field() { tr ' ' '\n' | awk -F= -v k="$1" '$1 == k {print $2}' | tail -1; }
# ct113 runs Debian's PyTorch under core type $1 ("-": unset).
ct113() {
	ct=$1
	shift
	if [ "$ct" = - ]; then env -u OPENBLAS_CORETYPE "$@"; else env OPENBLAS_CORETYPE="$ct" "$@"; fi
}
for m in mlp cnn; do
	ct=none
	if $have113; then
		ct=${coretype:-$(OMP_NUM_THREADS=$(nproc) OPENBLAS_NUM_THREADS=$(nproc) docs/bench/torch113_coretype.sh samples_per_s \
			/usr/bin/python3 "$script" --model "$m" --max-steps 30 --precision "$precision")}
	fi
	echo "$m" "$ct"
done >"$err.ct"
for r in $(seq "$rounds"); do
	for m in mlp cnn; do
		ct=$(awk -v m="$m" '$1 == m {print $2}' "$err.ct")
		for w in 1 2; do
			g=$("$bin" train mnist --model "$m" --nproc-per-node "$w" --max-steps "$steps" --precision "$precision" 2>"$err" | field samples_per_s) || true
			if [ -z "$g" ]; then
				g=failed
				grep -q -- "--precision" "$err" && g=no-bf16 && echo "note: gotrain $m: $(grep -m1 -- --precision "$err")"
			fi
			thr=1
			[ "$w" = 1 ] && thr=$(nproc)
			e=$(OMP_NUM_THREADS=$thr "$py2" "$script" --model "$m" --world "$w" --max-steps "$steps" --precision "$precision" 2>/dev/null | field samples_per_s) || true
			c=$(OMP_NUM_THREADS=$thr "$py2" "$script" --model "$m" --world "$w" --max-steps "$steps" --precision "$precision" --compile 2>/dev/null | field samples_per_s) || true
			d=none
			if $have113; then
				d=$(OMP_NUM_THREADS=$thr OPENBLAS_NUM_THREADS=$thr ct113 "$ct" /usr/bin/python3 "$script" --model "$m" --world "$w" --max-steps "$steps" --precision "$precision" 2>/dev/null | field samples_per_s) || true
			fi
			echo "round=$r model=$m world=$w precision=$precision gotrain=$g torch2_eager=${e:-failed} torch2_compile=${c:-failed} torch113_eager=${d:-failed} torch113_coretype=$ct"
		done
	done
done | tee "$out"
awk '
	/^round=/ { for (i = 1; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
	  k = f["model"] " world=" f["world"]; if (!(k in n)) order[++rows] = k
	  n[k]++; g[k, n[k]] = f["gotrain"]; e[k, n[k]] = f["torch2_eager"]; c[k, n[k]] = f["torch2_compile"]; d[k, n[k]] = f["torch113_eager"] }
	function median(a, k, cnt,   i, j, x, s) {
		for (i = 1; i <= cnt; i++) s[i] = a[k, i] + 0
		for (i = 1; i <= cnt; i++) for (j = i + 1; j <= cnt; j++) if (s[j] < s[i]) { x = s[i]; s[i] = s[j]; s[j] = x }
		return cnt % 2 ? s[(cnt + 1) / 2] : (s[cnt / 2] + s[cnt / 2 + 1]) / 2
	}
	END {
		printf "%-14s %10s %12s %14s %12s %10s %10s\n", "row", "gotrain", "torch2_eager", "torch2_compile", "torch113", "ratio2", "ratio113"
		for (r = 1; r <= rows; r++) {
			k = order[r]; mg = median(g, k, n[k]); me = median(e, k, n[k]); mc = median(c, k, n[k]); md = median(d, k, n[k])
			best = me > mc ? me : mc
			printf "%-14s %10.0f %12.0f %14.0f %12.0f %9.2fx %9.2fx\n", k, mg, me, mc, md, (best > 0 ? mg / best : 0), (md > 0 ? mg / md : 0)
		}
	}' "$out"
echo "precision: $precision"
echo "cpu: $(lscpu | awk -F: '/Model name/ {gsub(/^ +/, "", $2); print $2; exit}')"
