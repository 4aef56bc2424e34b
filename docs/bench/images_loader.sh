#!/bin/sh
# Does the image pipeline keep up with training? Writes a folder of
# 32×32 PNGs (CLASSES classes × PER_CLASS images, CIFAR-10's shape),
# trains ResNet-18 with the CIFAR stem on it for a few steps with
# --profile, and prints the time the step waits for data as a fraction of
# the step, with the decoded-image cache on and off and with 1 and the
# default number of decoding goroutines. Run from the repository root on
# an otherwise idle machine:
#
#   docs/bench/images_loader.sh [classes (10)] [per class (500)] [steps (30)] [batch (128)]
#
# data_frac near 0 means decoding and augmenting is hidden behind the
# step (prefetched on other CPUs); near 1, the step waits for images.
set -eu
classes=${1:-10}
per=${2:-500}
steps=${3:-30}
batch=${4:-128}
bin=${TMPDIR:-/tmp}/gotrain-bench-images
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
PATH=/usr/local/go/bin:$PATH go build -o "$bin" ./cmd/gotrain
# PNGs from Python's standard library alone: noisy RGB, so that they
# decode like photos rather than flat colour.
python3 - "$dir/train" "$classes" "$per" <<'PY'
import os, random, struct, sys, zlib
root, classes, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def chunk(t, d):
    return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
rng = random.Random(0)
for c in range(classes):
    os.makedirs(os.path.join(root, "class%02d" % c))
    for i in range(per):
        rows = b"".join(b"\0" + bytes(rng.randrange(256) for _ in range(32 * 3)) for _ in range(32))
        png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 32, 32, 8, 2, 0, 0, 0)) + \
            chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
        with open(os.path.join(root, "class%02d" % c, "%05d.png" % i), "wb") as f:
            f.write(png)
PY
echo "images=$((classes * per)) size=32x32 model=resnet18 stem=cifar batch=$batch steps=$steps cpus=$(nproc)"
for cache in 512 0; do
	for workers in 1 default; do
		wflag=""
		[ "$workers" = default ] || wflag="--workers $workers"
		# shellcheck disable=SC2086
		prof=$("$bin" train images "$dir/train" --val-fraction 0 --batch-size "$batch" --max-steps "$steps" \
			--cache-mib "$cache" $wflag --profile --progress=false 2>&1 | grep 'profile per step:' | tail -1)
		echo "$prof" | awk -v cache="$cache" -v workers="$workers" '{
			for (i = 1; i <= NF; i++) { n = split($i, kv, "="); if (n == 2) f[kv[1]] = kv[2] + 0 }
			step = f["data_ms"] + f["forward_ms"] + f["backward_ms"] + f["optimizer_ms"]
			printf "cache_mib=%s workers=%s data_ms=%.1f step_ms=%.1f data_frac=%.3f\n", cache, workers, f["data_ms"], step, (step > 0 ? f["data_ms"] / step : 0)
		}'
	done
done
