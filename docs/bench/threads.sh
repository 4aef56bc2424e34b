#!/bin/sh
# Two cores, three layouts: one process with 1 thread, one process with 2
# threads, and 2 DDP workers with 1 thread each, for the MNIST MLP and CNN
# jobs and the GPT job, gotrain and PyTorch 2.x eager side by side. Threads
# are GOTRAIN_NUM_THREADS for gotrain and OMP_NUM_THREADS (the scripts
# call torch.set_num_threads with it) for PyTorch; the workers run under
# `gotrain train --nproc-per-node 2` and PyTorch's DDP over gloo. Within a
# round the runs alternate (gotrain, PyTorch, next layout) so that drift on
# a shared machine hits them alike. Run from the repository root on an
# otherwise idle machine:
#
#   docs/bench/threads.sh [rounds (3)] [MNIST steps per rank (200)] [GPT steps (40)] [-- gpt flags]
#
# MODELS="mlp cnn gpt" chooses the models. Prints every run, then per model
# and runner the medians of each layout (samples/s for MNIST, tokens/s for
# GPT), the 2-thread/1-thread scaling, the 2-worker/1-thread scaling, and
# which 2-core layout is faster, then the CPU. PyTorch counts from its 11th
# (MNIST) or 6th (GPT) step; gotrain's summaries (samples/s, tokens/s)
# leave out the first 5 steps. `gotrain train JOB --nproc-per-node auto`
# picks the layout these figures favour (see its --help).
#
# Each run's line also gives the CPUs' slowest round trip (`gotrain bench
# cores`, max_ns) just before and just after it. A virtual machine's host
# may place its two vCPUs apart for a while: their round trip then takes
# several times as long, one process's 2 threads (which share each step's
# data) slow down, and separate processes do not. The summary's last
# column is t2/t1 with only the 2-thread runs whose round trips both
# stayed within 2× the fastest seen in the whole run ("-" when none did).
set -eu
rounds=${1:-3}
msteps=${2:-200}
gsteps=${3:-40}
[ $# -ge 3 ] && shift 3 || shift $#
[ "${1:-}" = "--" ] && shift
models=${MODELS:-mlp cnn gpt}
py2=$(docs/bench/torch2_env.sh)
bin=${TMPDIR:-/tmp}/gotrain-bench-threads
PATH=/usr/local/go/bin:$PATH CGO_ENABLED=0 go build -o "$bin" ./cmd/gotrain
out=$(mktemp)
trap 'rm -f "$out"' EXIT
field() { tr ' ' '\n' | awk -F= -v k="$1" '$1 == k {print $2}' | tail -1; }
gflags="--max-steps $gsteps --eval-every 1000000 --eval-batches 1 $*"
# run RUNNER MODEL LAYOUT prints the run's throughput; LAYOUT is t1, t2
# (one process, 1 or 2 threads) or w2 (2 workers, 1 thread each).
run() {
	thr=1
	w=1
	case $3 in t2) thr=2 ;; w2) w=2 ;; esac
	case $1/$2 in
	gotrain/gpt)
		GOTRAIN_NUM_THREADS=$thr "$bin" train gpt $gflags --progress=false --nproc-per-node $w 2>/dev/null | tail -n 1 | field tokens_per_s ;;
	gotrain/*)
		GOTRAIN_NUM_THREADS=$thr "$bin" train mnist --model "$2" --max-steps "$msteps" --nproc-per-node $w 2>/dev/null | field samples_per_s ;;
	torch2/gpt)
		OMP_NUM_THREADS=$thr "$py2" jobs/gptjob/testdata/train_gpt_torch.py $gflags --world $w 2>/dev/null | tail -n 1 | field tokens_per_s ;;
	torch2/*)
		OMP_NUM_THREADS=$thr "$py2" jobs/mnistjob/testdata/train_mnist_torch.py --model "$2" --max-steps "$msteps" --world $w 2>/dev/null | field samples_per_s ;;
	esac
}
for r in $(seq "$rounds"); do
	for m in $models; do
		for l in t1 t2 w2; do
			for rn in gotrain torch2; do
				c0=$("$bin" bench cores | field max_ns) || true
				v=$(run "$rn" "$m" "$l") || true
				c1=$("$bin" bench cores | field max_ns) || true
				echo "round=$r model=$m runner=$rn layout=$l per_s=${v:-failed} c2c_ns=${c0:-0}/${c1:-0}"
			done
		done
	done
done | tee "$out"
awk '
	{ for (i = 1; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
	  k = f["model"] SUBSEP f["runner"]; if (!(k in seen)) { seen[k] = 1; order[++rows] = k }
	  kl = k SUBSEP f["layout"]; n[kl]++; v[kl, n[kl]] = f["per_s"]
	  split(f["c2c_ns"], c, "/"); hi = (c[1] + 0 > c[2] + 0 ? c[1] + 0 : c[2] + 0); c2c[kl, n[kl]] = hi
	  for (i = 1; i <= 2; i++) if (c[i] + 0 > 0 && (lo == "" || c[i] + 0 < lo)) lo = c[i] + 0 }
	# closeMedian is the median of the runs of kl whose round trips both
	# stayed within 2x the fastest (lo), or 0.
	function closeMedian(kl,   i, cn) {
		cn = 0
		for (i = 1; i <= n[kl]; i++) if (c2c[kl, i] > 0 && c2c[kl, i] <= 2 * lo) { cn++; v[kl "close", cn] = v[kl, i] }
		n[kl "close"] = cn
		return median(kl "close")
	}
	function median(kl,   i, j, x, s, c) {
		c = n[kl]
		if (!c) return 0
		for (i = 1; i <= c; i++) s[i] = v[kl, i] + 0
		for (i = 1; i <= c; i++) for (j = i + 1; j <= c; j++) if (s[j] < s[i]) { x = s[i]; s[i] = s[j]; s[j] = x }
		return c % 2 ? s[(c + 1) / 2] : (s[c / 2] + s[c / 2 + 1]) / 2
	}
	END {
		printf "%-5s %-8s %10s %10s %10s %8s %8s %-8s %s\n", "model", "runner", "1thread", "2threads", "2workers", "t2/t1", "w2/t1", "faster", "t2/t1(close)"
		for (r = 1; r <= rows; r++) {
			split(order[r], mr, SUBSEP); k = order[r]
			t1 = median(k SUBSEP "t1"); t2 = median(k SUBSEP "t2"); w2 = median(k SUBSEP "w2")
			t2c = closeMedian(k SUBSEP "t2")
			printf "%-5s %-8s %10.0f %10.0f %10.0f %7.2fx %7.2fx %-8s %s\n", mr[1], mr[2], t1, t2, w2,
				(t1 > 0 ? t2 / t1 : 0), (t1 > 0 ? w2 / t1 : 0), (t2 > w2 ? "threads" : "workers"),
				(t1 > 0 && t2c > 0 ? sprintf("%.2fx", t2c / t1) : "-")
		}
		printf "fastest round trip between the CPUs: %s ns (close: both within 2x of it)\n", (lo == "" ? "?" : lo)
	}' "$out"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //') ($(nproc) CPUs)"
