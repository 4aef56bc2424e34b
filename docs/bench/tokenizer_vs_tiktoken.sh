#!/bin/sh
# Encoding speed of gotrain's tokenizers against tiktoken and Hugging Face
# tokenizers on the same text, in one run: MB/s on one thread and on all
# cores for gpt2, cl100k_base and o200k_base (tiktoken built from the rank
# data gotrain ships, so nothing is downloaded; tokenizers with a
# GPT-2-style tokenizer.json trained by gotrain on the text), then the
# ratios gotrain/tiktoken and gotrain/tokenizers, and the CPU. The same ids
# are checked first: a mismatch stops the run.
#
#   docs/bench/tokenizer_vs_tiktoken.sh [FILE] [SECONDS]
#
# FILE defaults to the shipped Go corpus (datasets/gotext) repeated to
# about 10 MB. Run from the repository root on an otherwise idle machine.
set -eu
SECS=${2:-3}
py=$(docs/bench/torch2_env.sh)
"$py" -c "import tiktoken, tokenizers" 2>/dev/null ||
	"$py" -m pip install --quiet "tiktoken==0.14.0" "tokenizers==0.23.3" >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
CGO_ENABLED=0 go build -o "$tmp/gotrain" ./cmd/gotrain
if [ $# -ge 1 ]; then
	text=$1
else
	text=$tmp/text.txt
	for _ in $(seq 30); do cat datasets/gotext/data/corpus.txt; done >"$text"
fi
nproc=$(getconf _NPROCESSORS_ONLN)
head -c 2000000 "$text" >"$tmp/train.txt"
"$tmp/gotrain" tokenizer train --vocab-size 8000 --out "$tmp/hf" "$tmp/train.txt" >/dev/null 2>&1

: >"$tmp/rates"
for enc in gpt2 cl100k_base o200k_base; do
	"$tmp/gotrain" tokenizer bench --tokenizer "$enc" --threads "$nproc" --min-time "${SECS}s" "$text" |
		awk -v e="$enc" '{for (i = 1; i <= NF; i++) {split($i, kv, "="); v[kv[1]] = kv[2]}
			print e, "gotrain", v["mb_per_s_1"], v["mb_per_s_N"]}' >>"$tmp/rates"
done
"$tmp/gotrain" tokenizer bench --tokenizer "$tmp/hf/tokenizer.json" --threads "$nproc" --min-time "${SECS}s" "$text" |
	awk '{for (i = 1; i <= NF; i++) {split($i, kv, "="); v[kv[1]] = kv[2]}
		print "trained8k", "gotrain", v["mb_per_s_1"], v["mb_per_s_N"]}' >>"$tmp/rates"

"$py" - "$text" "$tmp" "$SECS" "$nproc" >>"$tmp/rates" <<'PY'
import subprocess, sys, time
import tiktoken, tokenizers

path, tmp, secs, nproc = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
sys.path.insert(0, "data/tokenizer/testdata")
import gen_fixtures as g

text = open(path, encoding="utf-8").read()
mb = len(text.encode()) / 1e6
chunks = text.splitlines(keepends=True)
# Batches of about 64 KB for the multi-threaded runs.
batch, docs, cur = [], [], 0
for line in chunks:
    batch.append(line)
    cur += len(line)
    if cur > 65536:
        docs.append("".join(batch)); batch, cur = [], 0
docs.append("".join(batch))


def rate(f):
    start, reps = time.perf_counter(), 0
    while reps == 0 or time.perf_counter() - start < secs:
        f(); reps += 1
    return mb * reps / (time.perf_counter() - start)


def gotrain_ids(spec, sample):
    out = subprocess.run([tmp + "/gotrain", "tokenizer", "encode", "--tokenizer", spec],
                         input=sample.encode(), capture_output=True, check=True).stdout
    return [int(x) for x in out.split()]


sample = text[:200000]
for name, (file, pat, specials) in g.ENCODINGS.items():
    enc = tiktoken.Encoding(name=name + "_local", pat_str=pat, mergeable_ranks=g.load_ranks(file),
                            special_tokens=specials)
    if enc.encode_ordinary(sample) != gotrain_ids(name, sample):
        sys.exit("ids differ from tiktoken for " + name)
    one = rate(lambda: enc.encode_ordinary(text))
    alln = rate(lambda: enc.encode_ordinary_batch(docs, num_threads=nproc))
    print(name, "tiktoken", one, alln)

tok = tokenizers.Tokenizer.from_file(tmp + "/hf/tokenizer.json")
if tok.encode(sample, add_special_tokens=False).ids != gotrain_ids(tmp + "/hf/tokenizer.json", sample):
    sys.exit("ids differ from tokenizers")
one = rate(lambda: tok.encode(text, add_special_tokens=False))
print("trained8k", "tokenizers", one, rate(lambda: tok.encode_batch(docs, add_special_tokens=False)))
PY

echo "encoding    impl        MB/s_1thread  MB/s_${nproc}threads"
sort "$tmp/rates" | awk '{printf "%-11s %-11s %12.2f %12.2f\n", $1, $2, $3, $4}'
echo
echo "ratios (gotrain / reference), 1 thread and ${nproc} threads:"
awk '{r1[$1 " " $2] = $3; rn[$1 " " $2] = $4; enc[$1] = 1}
	END {for (e in enc) {ref = (e == "trained8k") ? "tokenizers" : "tiktoken"
		if ((e " " ref) in r1) printf "%-11s vs %-10s %6.2fx %6.2fx\n", e, ref, r1[e " gotrain"] / r1[e " " ref], rn[e " gotrain"] / rn[e " " ref]}}' "$tmp/rates" | sort
echo
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//') ($nproc cores)"
