#!/bin/sh
# The cost of fault tolerance on one machine: gotrain train mnist under
# `gotrain run --nproc-per-node N`, plain (DDP) and with --ft, for the
# same steps, then with --ft and one worker SIGKILLed after KILL_AT
# seconds (restarted once, healing from a peer). It prints per run the
# summary line (samples/s, test accuracy, and for --ft failures_survived,
# steps_lost, heals) and for the killed run the seconds from the kill to
# the next committed step and to the restarted worker's first.
#
#   docs/bench/ft.sh                               # 3 workers, 600 steps
#   NPROC=2 STEPS=20 KILL_AT=1 docs/bench/ft.sh    # a quick check that it works
#
# Run from anywhere on an otherwise idle machine.
set -eu
cd "$(dirname "$0")/../.."
NPROC="${NPROC:-3}"
STEPS="${STEPS:-600}"
KILL_AT="${KILL_AT:-5}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
go build -o "$dir/gotrain" ./cmd/gotrain
g="$dir/gotrain"
port=$((20000 + $$ % 20000))
job="train mnist --epochs 1000 --max-steps $STEPS --batch-size 32 --progress=false"

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
victim=""
for p in $(cat /proc/$launcher/task/*/children 2>/dev/null); do
	if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx 'RANK=1'; then victim=$p; fi
done
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
