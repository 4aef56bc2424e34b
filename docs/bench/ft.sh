#!/bin/sh
# The cost of fault tolerance on one machine: gotrain train mnist under
# `gotrain run --nproc-per-node N`, plain (DDP) and with --ft, for the
# same steps, then with --ft and one worker SIGKILLed after KILL_AT
# seconds (restarted once, healing from a peer). It prints per run the
# summary line (samples/s, test accuracy, and for --ft failures_survived,
# steps_lost, heals) and for the killed run the seconds from the kill to
# the next committed step and to the restarted worker's first.
#
# Then the heal time of the default GPT (`gotrain train gpt --ft`, 2
# workers): rank 1 is SIGKILLed after its first committed step and
# restarted; the script prints the bytes of state the replacement fetched
# from a peer and the seconds it spent on it (the "ft: heal received"
# record: from the request until the state is loaded, the sha256 checked).
#
# The workers talk over loopback, unshaped: this kernel has no sch_netem
# (no delay or loss can be emulated) and these runs shape no rate either;
# docs/bench/diloco.sh shapes a link's rate with tc tbf.
#
#   docs/bench/ft.sh                                         # 3 workers, 600 steps; GPT 20 steps
#   NPROC=2 STEPS=20 KILL_AT=1 GPT_STEPS=4 docs/bench/ft.sh  # a quick check that it works
#
# Run from anywhere on an otherwise idle machine.
set -eu
cd "$(dirname "$0")/../.."
NPROC="${NPROC:-3}"
STEPS="${STEPS:-600}"
KILL_AT="${KILL_AT:-5}"
GPT_STEPS="${GPT_STEPS:-20}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
go build -o "$dir/gotrain" ./cmd/gotrain
g="$dir/gotrain"
port=$((20000 + $$ % 20000))
job="train mnist --epochs 1000 --max-steps $STEPS --batch-size 32 --progress=false"

# rank1 prints the pid of launcher $1's worker of RANK=1, or nothing.
rank1() {
	for p in $(cat /proc/"$1"/task/*/children 2>/dev/null); do
		if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx 'RANK=1'; then echo "$p"; fi
	done
}

for mode in ddp ft; do
	flag=""
	[ "$mode" = ft ] && flag=--ft
	port=$((port + 1))
	"$g" run --nproc-per-node "$NPROC" --master-port "$port" "$g" $job $flag >"$dir/$mode.log" 2>&1
	printf '%-8s %s\n' "$mode" "$(grep 'model=' "$dir/$mode.log" | tail -1 | sed 's/^\[rank0\]: //')"
done

port=$((port + 1))
GOTRAIN_FT_TRACE=1 GOTRAIN_HEARTBEAT_TIMEOUT=3s "$g" run --nproc-per-node "$NPROC" --max-restarts 1 --restart-backoff 0 \
	--master-port "$port" "$g" $job --ft >"$dir/kill.log" 2>&1 &
launcher=$!
sleep "$KILL_AT"
victim=$(rank1 $launcher)
[ -n "$victim" ] || { echo "ft.sh: no rank 1 under pid $launcher (the job ended before KILL_AT=$KILL_AT s?)"; wait $launcher; exit 1; }
killed=$(date +%s.%N)
kill -9 "$victim"
wait $launcher
printf '%-8s %s\n' "ft-kill" "$(grep 'model=' "$dir/kill.log" | tail -1 | sed 's/^\[rank0\]: //')"
# The first committed step after the kill, on rank 0 and on rank 1.
for r in 0 1; do
	t=$(grep "^\[rank$r\]: .*msg=\"ft: committed\"" "$dir/kill.log" | sed 's/.*time=\([^ ]*\) .*/\1/' |
		while read -r ts; do s=$(date -d "$ts" +%s.%N); if [ "$(echo "$s > $killed" | bc)" = 1 ]; then echo "$s"; break; fi; done)
	[ -n "$t" ] && printf 'rank %d: first committed step %.2f s after the kill\n' "$r" "$(echo "$t - $killed" | bc)"
done

# The default GPT's heal: kill rank 1 once it has committed a step (the
# job has started), then read what its replacement logged.
port=$((port + 1))
GOTRAIN_FT_TRACE=1 GOTRAIN_HEARTBEAT_TIMEOUT=10s "$g" run --nproc-per-node 2 --max-restarts 1 --restart-backoff 0 \
	--master-port "$port" "$g" train gpt --ft --max-steps "$GPT_STEPS" --progress=false >"$dir/gpt.log" 2>&1 &
launcher=$!
while ! grep -q '^\[rank1\]: .*msg="ft: committed"' "$dir/gpt.log"; do
	kill -0 $launcher 2>/dev/null || { echo "ft.sh: the GPT job ended before rank 1 committed a step:"; cat "$dir/gpt.log"; exit 1; }
	sleep 0.2
done
victim=$(rank1 $launcher)
[ -n "$victim" ] || { echo "ft.sh: no rank 1 under pid $launcher"; wait $launcher; exit 1; }
kill -9 "$victim"
wait $launcher || { echo "ft.sh: the GPT job failed:"; cat "$dir/gpt.log"; exit 1; }
heal=$(grep '^\[rank1\]: .*msg="ft: heal received"' "$dir/gpt.log" | tail -1)
[ -n "$heal" ] || { echo "ft.sh: rank 1's replacement did not heal (the job ended first? raise GPT_STEPS):"; tail -20 "$dir/gpt.log"; exit 1; }
bytes=$(echo "$heal" | sed 's/.* bytes=\([0-9]*\).*/\1/')
took=$(echo "$heal" | sed 's/.* took=\([^ ]*\).*/\1/')
# took is a Go duration: 1.234s, 567.8ms or 12.3µs.
secs=$(echo "$took" | awk '/ms$/ { sub(/ms$/, ""); print $0 / 1000; next } /µs$/ { sub(/µs$/, ""); print $0 / 1e6; next } /s$/ { sub(/s$/, ""); print $0 + 0 }')
printf 'gpt heal: %s bytes of state fetched from a peer in %s s (%s)\n' "$bytes" "$secs" "$(grep 'model=' "$dir/gpt.log" | tail -1 | sed 's/^\[rank0\]: //')"
