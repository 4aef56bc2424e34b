#!/usr/bin/python3
"""Writes optim_fixtures.json: torch.optim trajectories for the Go tests.

Run with Debian's PyTorch 1.13 from the optim directory:

    /usr/bin/python3 testdata/gen_fixtures.py

For every optimizer configuration it records the initial parameters, a
fixed sequence of gradients (None means the parameter has no gradient in
that step and must be skipped) and the parameters after each step. For the
schedulers it records the learning rate after each scheduler step.
"""
import json
import os

import torch

STEPS = 10
SHAPES = [(3, 4), (5,)]


def flat(t):
    return [float(v) for v in t.detach().reshape(-1).tolist()]


def optimizer_case(name, make, lr, options):
    g = torch.Generator().manual_seed(1234)
    params = [torch.randn(s, generator=g).requires_grad_() for s in SHAPES]
    init = [flat(p) for p in params]
    opt = make(params, lr=lr, **options)
    grads, after = [], []
    for step in range(STEPS):
        gs = []
        for i, p in enumerate(params):
            # The second parameter has no gradient in step 3: optimizers
            # must skip it and keep its per-parameter step count behind.
            if i == 1 and step == 3:
                p.grad = None
                gs.append(None)
                continue
            grad = torch.randn(p.shape, generator=g)
            p.grad = grad.clone()
            gs.append(flat(grad))
        opt.step()
        grads.append(gs)
        after.append([flat(p) for p in params])
    return {
        "name": name,
        "optimizer": make.__name__,
        "lr": lr,
        "options": options,
        "shapes": [list(s) for s in SHAPES],
        "init": init,
        "grads": grads,
        "params": after,
    }


def scheduler_case(name, make, base_lr, options, steps=25):
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=base_lr)
    sched = make(opt, **options)
    lrs = []
    for _ in range(steps):
        opt.step()
        sched.step()
        lrs.append(sched.get_last_lr()[0])
    return {"name": name, "scheduler": make.__name__, "base_lr": base_lr, "options": options, "lrs": lrs}


def main():
    o = torch.optim
    cases = [
        optimizer_case("sgd_plain", o.SGD, 0.1, {}),
        optimizer_case("sgd_momentum", o.SGD, 0.05, {"momentum": 0.9}),
        optimizer_case("sgd_nesterov_wd", o.SGD, 0.05, {"momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
        optimizer_case("sgd_dampening_wd", o.SGD, 0.05, {"momentum": 0.8, "dampening": 0.3, "weight_decay": 0.1}),
        optimizer_case("sgd_maximize", o.SGD, 0.05, {"momentum": 0.5, "maximize": True}),
        optimizer_case("adam_default", o.Adam, 0.01, {}),
        optimizer_case("adam_wd_betas", o.Adam, 0.02, {"betas": [0.8, 0.99], "eps": 1e-6, "weight_decay": 0.1}),
        optimizer_case("adamw_default", o.AdamW, 0.01, {}),
        optimizer_case("adamw_wd", o.AdamW, 0.03, {"weight_decay": 0.2, "betas": [0.85, 0.995]}),
        optimizer_case("adadelta_default", o.Adadelta, 1.0, {}),
        optimizer_case("adadelta_wd", o.Adadelta, 0.5, {"rho": 0.8, "eps": 1e-5, "weight_decay": 0.05}),
    ]
    lr = torch.optim.lr_scheduler
    schedulers = [
        scheduler_case("steplr", lr.StepLR, 0.1, {"step_size": 3, "gamma": 0.7}),
        scheduler_case("steplr_1", lr.StepLR, 1.0, {"step_size": 1, "gamma": 0.7}),
        scheduler_case("cosine", lr.CosineAnnealingLR, 0.1, {"T_max": 10, "eta_min": 0.001}),
        scheduler_case("cosine_zero_min", lr.CosineAnnealingLR, 0.5, {"T_max": 7}),
    ]
    out = {"torch_version": torch.__version__, "optimizers": cases, "schedulers": schedulers}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "optim_fixtures.json")
    with open(path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
