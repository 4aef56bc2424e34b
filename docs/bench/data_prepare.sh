#!/bin/sh
# `gotrain data prepare` throughput, on 1 worker and on every core, and
# the data wait the GPT job exposes when it trains on the prepared shards.
#
#   docs/bench/data_prepare.sh [SIZE_MB] [TOKENIZER] [STEPS]
#
# SIZE_MB (default 200) of corpus are built from the module's Go sources,
# copied over and over into text files (one document each) and a JSONL
# file (one document per line); TOKENIZER (default gpt2) encodes them.
# Prints the MB/s of each run (the summary's mb_per_s: bytes of text per
# second of the whole prepare, shards fsynced and index written), then
# the GPT job's `profile per step:` line (--profile: data_ms is the time
# a step waits for its batch) for STEPS steps (default 20) of the gpt2
# preset's width on 2 workers, then the CPU. Run from the repository root
# on an otherwise idle machine.
set -eu
SIZE_MB=${1:-200}
TOKENIZER=${2:-gpt2}
STEPS=${3:-20}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
CGO_ENABLED=0 go build -o "$tmp/gotrain" ./cmd/gotrain

# The corpus: the Go sources, one document each, copied over and over,
# every other one a line of docs.jsonl, the others text files.
mkdir "$tmp/corpus"
find . -name '*.go' -not -path './.git/*' | sort >"$tmp/sources"
n=$(python3 - "$tmp/sources" "$tmp/corpus" "$SIZE_MB" <<'PY'
import json, sys
sources = open(sys.argv[1]).read().split()
out, want = sys.argv[2], int(sys.argv[3]) * 10**6
have = n = 0
with open(out + "/docs.jsonl", "w") as jl:
    while have < want:
        for f in sources:
            if have >= want:
                break
            text = open(f, encoding="utf-8").read()
            n += 1
            if n % 2:
                jl.write(json.dumps({"text": text}) + "\n")
            else:
                open("%s/%06d.txt" % (out, n), "w").write(text)
            have += len(text.encode())
print(n)
PY
)
echo "corpus: $(du -sh "$tmp/corpus" | cut -f1) in $n documents, tokenizer $TOKENIZER"

for workers in 1 "$(nproc)"; do
	"$tmp/gotrain" data prepare --tokenizer "$TOKENIZER" --out "$tmp/ds" --workers "$workers" \
		--val-fraction 0.01 "$tmp/corpus" >"$tmp/prepare.out" 2>"$tmp/prepare.err" || {
		cat "$tmp/prepare.err" >&2
		exit 1
	}
	awk '{for (i = 1; i <= NF; i++) if ($i ~ /^(workers|mb_per_s|tokens_per_s|train_tokens)=/) printf "%s ", $i; print ""}' "$tmp/prepare.out"
done

# The job on the shards: the gpt2 preset's shape but 2 blocks and 256
# tokens, so that a step is short and the data wait shows.
"$tmp/gotrain" train gpt --data "$tmp/ds" --preset gpt2 --n-layer 2 --block-size 256 --batch-size 8 \
	--max-steps "$STEPS" --eval-every "$STEPS" --eval-batches 1 --warmup-steps 0 --nproc-per-node 2 \
	--profile --progress=false 2>&1 | grep -E 'profile per step|^model='
grep -m1 'model name' /proc/cpuinfo || true
