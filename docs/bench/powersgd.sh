#!/bin/sh
# PowerSGD against float32 and bf16 gradients on a 100 Mbit/s link: two
# network-namespace nodes of one worker each (testing/clustertest, needs
# root, iproute2 and nftables) train the MNIST MLP for an epoch with
# --comm-hook allreduce, bf16 and powersgd at rank 1, 2 and 4, then the
# default GPT with allreduce and powersgd rank 2.
#
# It prints, per hook, the payload bytes rank 0 sends per step, samples/s
# and the test accuracy, and PowerSGD's samples/s over float32's (target
# >= 4 for the MLP), its accuracy minus float32's (target >= -0.005) and
# the GPT's validation loss ratio (target <= 1.03).
#
#   docs/bench/powersgd.sh              # the full runs (an hour or more on 2 cores)
#   MNIST_STEPS=20 GPT_STEPS=10 docs/bench/powersgd.sh   # a quick check that it works
#   MODELS=mnist docs/bench/powersgd.sh # the MNIST part only (or gpt)
set -eu
cd "$(dirname "$0")/../.."
BENCH_POWERSGD_MNIST_STEPS="${MNIST_STEPS:-}" \
BENCH_POWERSGD_GPT_STEPS="${GPT_STEPS:-}" \
BENCH_POWERSGD_MODELS="${MODELS:-}" \
	exec go test ./cmd/gotrain -run '^$' -bench '^BenchmarkClusterPowerSGD$' -benchtime 1x -timeout 6h -v
