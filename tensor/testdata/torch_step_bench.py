#!/usr/bin/env python3
"""PyTorch counterpart of BenchmarkMLPStep and BenchmarkCNNStep.

Times one SGD training step (zero_grad, forward, cross-entropy, backward,
step) of the same models on the same MNIST-shaped random batch of 64, with
no data loading, so the Go benchmarks can be compared side by side:

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=1 \\
        /usr/bin/python3 tensor/testdata/torch_step_bench.py cnn [threads] [steps] [fp32|bf16]
    GOMAXPROCS=1 GOTRAIN_NUM_THREADS=1 go test ./tensor -run '^$' -bench CNNStep -benchtime 20x

It prints samples/s (wall) and samples per CPU-second; on a shared machine
the second is the steadier figure, as in the Go benchmarks. bf16 runs the
forward (and so its backward) under torch.autocast("cpu", dtype=torch.bfloat16),
PyTorch's CPU mixed precision (oneDNN bf16 kernels where the CPU has them).
"""
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def main():
    name = sys.argv[1] if len(sys.argv) > 1 else "mlp"
    torch.set_num_threads(int(sys.argv[2]) if len(sys.argv) > 2 else 1)
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else (200 if name == "mlp" else 20)
    precision = sys.argv[4] if len(sys.argv) > 4 else "fp32"
    if precision not in ("fp32", "bf16"):
        sys.exit("precision %r: want fp32 or bf16" % precision)
    torch.manual_seed(0)
    if name == "mlp":
        model = nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                              nn.Linear(512, 10))
    else:  # pytorch/examples MNIST Net
        model = nn.Sequential(nn.Conv2d(1, 32, 3, 1), nn.ReLU(), nn.Conv2d(32, 64, 3, 1), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Dropout(0.25), nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(), nn.Dropout(0.5),
                              nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.rand(64, 1, 28, 28)
    y = torch.randint(0, 10, (64,))

    def step():
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    for _ in range(5):
        step()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        step()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(f"torch {name} precision={precision} threads={torch.get_num_threads()} samples/s={64 * steps / wall:.0f} "
          f"samples/cpu-s={64 * steps / cpu:.0f}")


if __name__ == "__main__":
    main()
