#!/usr/bin/env python3
"""Times one training step of torchvision's ResNet-18 with the CIFAR stem
(conv1 3x3 stride 1 padding 1, no max pooling, 10 classes) on 32x32
images in PyTorch: zero the gradients, forward, cross-entropy, backward,
SGD with momentum 0.9 and weight decay 5e-4 -- the side-by-side figure for
BenchmarkResNet18Step.

usage: PY nn/models/testdata/torch_resnet_step_bench.py [threads (1)] [steps (10)] [batch (128)] [eager|compile]
(PY: the venv of docs/bench/torch2_env.sh, with torchvision)
"""
import sys, time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    batch = int(sys.argv[3]) if len(sys.argv) > 3 else 128
    mode = sys.argv[4] if len(sys.argv) > 4 else "eager"
    if mode not in ("eager", "compile"):
        sys.exit("mode %r: want eager or compile" % mode)
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    model = torchvision.models.resnet18(num_classes=10)
    model.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    model.maxpool = nn.Identity()
    model.train()
    fwd = torch.compile(model) if mode == "compile" else model
    x = torch.randn(batch, 3, 32, 32)
    y = torch.randint(0, 10, (batch,))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)

    def step():
        opt.zero_grad(set_to_none=False)
        loss = F.cross_entropy(fwd(x), y)
        loss.backward()
        opt.step()

    for _ in range(2):  # warm-up (and compilation)
        step()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        step()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print("torch_resnet18_step mode=%s threads=%d batch=%d s_per_step=%.4f images_per_s=%.1f images_per_cpu_s=%.1f"
          % (mode, threads, batch, wall / steps, batch * steps / wall, batch * steps / cpu))


if __name__ == "__main__":
    main()
