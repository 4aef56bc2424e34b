#!/usr/bin/python3
"""PyTorch side of the optimizer step benchmark (bench_test.go): one step
over the MNIST MLP's parameters (784-512-512-10, 669 706 values), one
thread. Run beside the Go benchmark in the same session:

    OMP_NUM_THREADS=1 /usr/bin/python3 testdata/torch_optim_bench.py
    go test ./optim -run '^$' -bench Step -benchtime 500x
"""
import time

import torch

torch.set_num_threads(1)
SHAPES = [(512, 784), (512,), (512, 512), (512,), (10, 512), (10,)]
CASES = [
    ("SGDMomentum", lambda ps: torch.optim.SGD(ps, lr=0.01, momentum=0.9)),
    ("Adam", lambda ps: torch.optim.Adam(ps, lr=1e-3)),
    ("AdamW", lambda ps: torch.optim.AdamW(ps, lr=1e-3)),
    ("Adadelta", lambda ps: torch.optim.Adadelta(ps, lr=1.0)),
]

for name, make in CASES:
    best = None
    for foreach in (False, True):
        ps = [torch.full(s, 0.5, requires_grad=True) for s in SHAPES]
        for p in ps:
            p.grad = torch.full(p.shape, 0.01)
        opt = make(ps)
        for g in opt.param_groups:
            g["foreach"] = foreach
        for _ in range(20):
            opt.step()
        n = 500
        t = time.perf_counter()
        for _ in range(n):
            opt.step()
        us = (time.perf_counter() - t) / n * 1e6
        best = us if best is None else min(best, us)
        print(f"torch {name} foreach={foreach}: {us:.0f} us/step")
    print(f"torch {name} best: {best:.0f} us/step")
