#!/bin/sh
# How close the one-thread GPT and CNN steps come to their GEMMs, gotrain
# and PyTorch 2.x side by side, and what that allows against PyTorch. For
# each GPT (the default 4×128, and 12×768 at block 256, batch 4), one
# thread throughout:
#
#   - gotrain: tokens/s of `gotrain train gpt`, the step's GEMM-rate bound
#     from `gotrain bench gemm --gpt-*` (every GEMM the step runs at the
#     rate measured for its shape) and the fraction of it reached; the
#     model's bound (attention's causal half, nothing recomputed) beside
#     it; the same in bf16 against the bf16 kernel's bound;
#   - PyTorch eager (and torch.compile, see COMPILE): its step time, and
#     from torch.profiler the self CPU time of its GEMM operators (mm,
#     addmm, bmm, baddbmm) with their FLOPs and rate, and of its fused
#     attention (see jobs/gptjob/testdata/gemm_share_torch.py);
#   - one line: the fastest gotrain step possible, the model's GEMM FLOPs
#     at the highest one-thread SGEMM rate measured with nothing else
#     taking time, and the best ratio to the faster PyTorch that allows,
#     against 1.5×.
#
# Then the MNIST CNN's fraction of its bound (batch 64), and the CPU. Run
# from the repository root on an otherwise idle machine (about 5 minutes;
# COMPILE=all adds several minutes):
#
#   docs/bench/gemm_share.sh
#
# MODELS lists the GPTs as NAME:LAYERS:HEADS:EMBD:BLOCK:BATCH (default
# "4x128:4:4:128:128:32 12x768:12:12:768:256:4"); COMPILE=first (default:
# torch.compile the first GPT only, its compilation takes a minute), all or
# none. Steps, one value per GPT (the last for the rest): GPT_STEPS (25,7:
# gotrain's, all but the first 5 timed), TORCH_WARMUP (3,1: PyTorch's
# untimed), TORCH_STEPS (10,2: timed), TORCH_PROFILE (2,1: profiled);
# CNN_STEPS (300); MIN_TIME (bench gemm's time per shape, 200ms).
#
# The fractions are tokens/s over bound tokens/s: "bound" counts the GEMMs
# the step runs (gotrain's causal attention tiles 32-row blocks, 10/16 of
# the scores at T = 128, and recomputes them in backward above T = 128),
# "model_bnd" the
# work the model needs, both at the rates bench gemm measures per shape.
set -eu
models=${MODELS:-4x128:4:4:128:128:32 12x768:12:12:768:256:4}
compile=${COMPILE:-first}
gsteps=${GPT_STEPS:-25,7}
tsteps=${TORCH_STEPS:-10,2}
twarm=${TORCH_WARMUP:-3,1}
tprof=${TORCH_PROFILE:-2,1}
csteps=${CNN_STEPS:-300}
mintime=${MIN_TIME:-200ms}
case $compile in first | all | none) ;; *) echo "gemm_share: COMPILE=$compile: must be first, all or none" >&2; exit 2 ;; esac
for spec in $models; do
	echo "$spec" | awk -F: 'NF != 6 { exit 1 } { for (i = 2; i <= 6; i++) if ($i !~ /^[1-9][0-9]*$/) exit 1 }' ||
		{ echo "gemm_share: MODELS: $spec: want NAME:LAYERS:HEADS:EMBD:BLOCK:BATCH, the numbers whole and positive" >&2; exit 2; }
done
py2=$(docs/bench/torch2_env.sh)
bin=${TMPDIR:-/tmp}/gotrain-bench-gemm-share
PATH=/usr/local/go/bin:$PATH CGO_ENABLED=0 go build -o "$bin" ./cmd/gotrain
out=$(mktemp)
trap 'rm -f "$out" "$out.gemm" "$out.err"' EXIT
export GOTRAIN_NUM_THREADS=1 OMP_NUM_THREADS=1
field() { tr ' ' '\n' | awk -F= -v k="$1" '$1 == k {print $2}' | tail -1; }
# nth LIST N prints the Nth of a comma-separated list, or its last.
nth() { echo "$1" | awk -F, -v n="$2" '{ print (n <= NF ? $n : $NF) }'; }
i=0
for spec in $models; do
	i=$((i + 1))
	IFS=: read -r name layers heads embd block batch <<EOF
$spec
EOF
	gemmflags="--gpt-layers $layers --gpt-heads $heads --gpt-embd $embd --gpt-block $block --gpt-batch $batch"
	trainflags="--n-layer $layers --n-head $heads --n-embd $embd --block-size $block --batch-size $batch"
	for p in fp32 bf16; do
		if "$bin" bench gemm --threads 1 --min-time "$mintime" --precision $p $gemmflags >"$out.gemm" 2>"$out.err"; then
			# The highest one-thread SGEMM rate of any shape measured.
			peak=$(awk '/^m=/ { for (i = 1; i <= NF; i++) if ($i ~ /^gflops=/) { v = substr($i, 8) + 0; if (v > p) p = v } } END { print p }' "$out.gemm")
			echo "model=$name runner=gotrain-bench precision=$p peak_gflops=$peak $(grep '^step=gpt' "$out.gemm" | cut -d' ' -f3-)"
			[ "$i$p" = 1fp32 ] && echo "model=cnn runner=gotrain-bench precision=$p $(grep '^step=cnn' "$out.gemm" | cut -d' ' -f3-)"
			v=$("$bin" train gpt $trainflags --precision $p --max-steps "$(nth "$gsteps" "$i")" --eval-every 1000000 --eval-batches 1 --progress=false 2>/dev/null | tail -n 1 | field tokens_per_s) || true
			echo "model=$name runner=gotrain precision=$p tokens_per_s=${v:-failed}"
		else
			echo "model=$name runner=gotrain-bench precision=$p failed=\"$(head -n 1 "$out.err")\""
		fi
	done
	modes=eager
	{ [ "$compile" = all ] || { [ "$compile" = first ] && [ "$i" = 1 ]; }; } && modes="eager compile"
	for mode in $modes; do
		flag=
		[ "$mode" = compile ] && flag=--compile
		line=$("$py2" jobs/gptjob/testdata/gemm_share_torch.py $trainflags $flag --warmup "$(nth "$twarm" "$i")" \
			--steps "$(nth "$tsteps" "$i")" --profile-steps "$(nth "$tprof" "$i")" 2>/dev/null | grep '^runner=') || true
		echo "model=$name ${line:-runner=torch2 mode=$mode failed=1}"
	done
done | tee "$out"
v=$("$bin" train mnist --model cnn --max-steps "$csteps" 2>/dev/null | field samples_per_s) || true
echo "model=cnn runner=gotrain precision=fp32 samples_per_s=${v:-failed}" | tee -a "$out"
awk '
	function get(line, k,   i, n, kv, f) {
		n = split(line, f, " ")
		for (i = 1; i <= n; i++) if (index(f[i], k "=") == 1) return substr(f[i], length(k) + 2)
		return ""
	}
	{
		m = get($0, "model"); r = get($0, "runner"); p = get($0, "precision"); mode = get($0, "mode")
		if (!(m in seen)) { seen[m] = 1; order[++n] = m }
		key = m SUBSEP r SUBSEP (r == "torch2" ? mode : p)
		line[key] = $0
	}
	END {
		printf "%-7s %-9s %-9s %10s %10s %6s %10s %6s\n", "model", "runner", "precision", "per_s", "bound", "frac", "model_bnd", "frac"
		for (j = 1; j <= n; j++) {
			m = order[j]
			for (q = 1; q <= 2; q++) {
				p = q == 1 ? "fp32" : "bf16"
				b = line[m, "gotrain-bench", p]; g = line[m, "gotrain", p]
				if (b == "" || get(b, "failed") != "") { if (b != "") printf "%-7s %-9s %-9s no bound: %s\n", m, "gotrain", p, substr(b, index(b, "failed=")); continue }
				unit = m == "cnn" ? "samples_per_s" : "tokens_per_s"
				bound = get(b, "bound_" unit) + 0; mb = get(b, "model_bound_tokens_per_s") + 0
				v = get(g, unit) + 0
				printf "%-7s %-9s %-9s %10.0f %10.0f %6.3f %10s %6s\n", m, "gotrain", p, v, bound, (bound > 0 ? v / bound : 0),
					(mb > 0 ? sprintf("%.0f", mb) : "-"), (mb > 0 ? sprintf("%.3f", v / mb) : "-")
			}
		}
		printf "\n%-7s %-8s %9s %10s %7s %8s %7s %8s %9s %12s\n", "model", "torch2", "tokens/s", "step_s", "gemm_s", "gemm_sh", "GFLOP/s", "attn_sh", "gemm+attn", "gemm_gflop"
		for (j = 1; j <= n; j++) {
			m = order[j]
			for (q = 1; q <= 2; q++) {
				mode = q == 1 ? "eager" : "compile"
				t = line[m, "torch2", mode]
				if (t == "") continue
				if (get(t, "failed") != "") { printf "%-7s %-8s failed\n", m, mode; continue }
				printf "%-7s %-8s %9.0f %10.4f %7.4f %8.3f %7.1f %8.3f %9.3f %12.3f\n", m, mode, get(t, "tokens_per_s"), get(t, "step_s"),
					get(t, "gemm_s"), get(t, "gemm_share"), get(t, "gemm_gflops"), get(t, "attn_share"), get(t, "gemm_attn_share"), get(t, "gemm_gflop")
			}
		}
		print ""
		for (j = 1; j <= n; j++) {
			m = order[j]
			b = line[m, "gotrain-bench", "fp32"]
			if (m == "cnn" || b == "" || get(b, "failed") != "") continue
			# The faster PyTorch step, eager or compiled.
			best = 0; bestmode = ""
			for (q = 1; q <= 2; q++) {
				mode = q == 1 ? "eager" : "compile"
				t = line[m, "torch2", mode]
				s = get(t, "step_s") + 0
				if (t != "" && get(t, "failed") == "" && s > 0 && (best == 0 || s < best)) { best = s; bestmode = mode }
			}
			if (best == 0) { printf "model=%s no PyTorch step to compare with\n", m; continue }
			peak = get(b, "peak_gflops") + 0
			fastest = get(b, "model_gflop_per_step") * 1e9 / (peak * 1e9)
			atbound = get(b, "gemm_seconds_per_step") + 0
			tokens = get(b, "block") * get(b, "batch")
			now = get(line[m, "gotrain", "fp32"], "tokens_per_s") * best / tokens
			r = best / fastest
			printf "model=%s fastest_gotrain_step_s=%.4f (%.3f GFLOP at %.1f GFLOP/s, nothing else) torch2_%s_step_s=%.4f best_ratio=%.2fx ratio_at_step_bound=%.2fx now=%.2fx; 1.5x: %s\n",
				m, fastest, get(b, "model_gflop_per_step"), peak, bestmode, best, r, best / atbound, now,
				(r >= 1.5 ? "the GEMM bound allows it" : "out of reach: the GEMMs alone at the peak rate take longer")
		}
	}' "$out"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //') ($(env -u OMP_NUM_THREADS nproc) CPUs, one thread used)"
