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


GROUP_SHAPES = [(4, 3), (3,), (2, 5), (5,)]


def grouped_case(name, make, lr, options, groups):
    """Parameter groups with their own lr and weight decay; groups is a list
    of (parameter indices, group options). The first group takes the
    constructor's options (as gotrain's constructor parameters do)."""
    g = torch.Generator().manual_seed(99)
    params = [torch.randn(s, generator=g).requires_grad_() for s in GROUP_SHAPES]
    init = [flat(p) for p in params]
    opt = make([dict(params=[params[i] for i in idx], **kw) for idx, kw in groups], lr=lr, **options)
    grads, after = [], []
    for _ in range(STEPS):
        gs = []
        for p in params:
            grad = torch.randn(p.shape, generator=g)
            p.grad = grad.clone()
            gs.append(flat(grad))
        opt.step()
        grads.append(gs)
        after.append([flat(p) for p in params])
    return {
        "name": name, "optimizer": make.__name__, "lr": lr, "options": options,
        "groups": [{"params": idx, "options": kw} for idx, kw in groups],
        "shapes": [list(s) for s in GROUP_SHAPES], "init": init, "grads": grads, "params": after,
    }


def clip_case(name, max_norm, scale):
    g = torch.Generator().manual_seed(7)
    params = [torch.zeros(s, requires_grad=True) for s in GROUP_SHAPES]
    grads = []
    for p in params:
        p.grad = torch.randn(p.shape, generator=g) * scale
        grads.append(flat(p.grad))
    params[2].grad = None  # a parameter without gradient is skipped
    grads[2] = None
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    return {
        "name": name, "max_norm": max_norm, "shapes": [list(s) for s in GROUP_SHAPES],
        "grads": grads, "norm": float(norm),
        "clipped": [None if p.grad is None else flat(p.grad) for p in params],
    }


def schedule_case(name, make, base_lrs, steps=30):
    """A scheduler over an optimizer of one group per base rate, stepped once
    per batch; records every group's rate after construction and after each
    step."""
    ps = [torch.zeros(1, requires_grad=True) for _ in base_lrs]
    opt = torch.optim.AdamW([{"params": [p], "lr": lr} for p, lr in zip(ps, base_lrs)], lr=base_lrs[0])
    sched = make(opt)
    lrs = [[g["lr"] for g in opt.param_groups]]
    for _ in range(steps):
        opt.step()
        sched.step()
        lrs.append(list(sched.get_last_lr()))
    return {"name": name, "base_lrs": base_lrs, "lrs": lrs}


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
    grouped = [
        grouped_case("adamw_decay_groups", o.AdamW, 1e-2, {"betas": [0.9, 0.95], "weight_decay": 0.1},
                     [([0, 2], {}), ([1, 3], {"weight_decay": 0.0})]),
        grouped_case("sgd_lr_groups", o.SGD, 0.05, {"momentum": 0.9, "weight_decay": 0.01},
                     [([0, 1], {}), ([2, 3], {"lr": 0.2, "weight_decay": 0.0})]),
        grouped_case("adam_lr_wd_groups", o.Adam, 1e-2, {"weight_decay": 0.3},
                     [([0], {}), ([1, 2, 3], {"lr": 3e-3, "weight_decay": 0.0})]),
    ]
    clips = [
        clip_case("clip_active", 1.0, 1.0),
        clip_case("clip_inactive", 100.0, 1.0),
        clip_case("clip_tiny_grads", 0.5, 1e-3),
    ]
    ls = lr

    def lambda_lr(opt):
        return ls.LambdaLR(opt, lambda e: 0.9 ** e)

    def warmup_cosine(opt):
        warm = ls.LinearLR(opt, start_factor=0.01, end_factor=1.0, total_iters=10)
        cos = ls.CosineAnnealingLR(opt, T_max=20, eta_min=1e-4)
        return ls.SequentialLR(opt, [warm, cos], milestones=[10])

    def three_stage(opt):
        a = ls.LinearLR(opt, start_factor=0.5, end_factor=1.0, total_iters=4)
        b = ls.StepLR(opt, step_size=3, gamma=0.5)
        c = ls.LambdaLR(opt, lambda e: 1.0 / (1 + e))
        return ls.SequentialLR(opt, [a, b, c], milestones=[5, 12])

    schedules = [
        schedule_case("lambda_exp", lambda_lr, [0.1, 0.02]),
        schedule_case("linear_warmup", lambda o_: ls.LinearLR(o_, start_factor=0.1, end_factor=1.0, total_iters=8), [1e-3, 5e-3]),
        schedule_case("linear_decay", lambda o_: ls.LinearLR(o_, start_factor=1.0, end_factor=0.2, total_iters=12), [0.3]),
        schedule_case("warmup_cosine", warmup_cosine, [1e-3, 2e-3]),
        schedule_case("three_stage", three_stage, [0.4]),
        schedule_case("onecycle_cos", lambda o_: ls.OneCycleLR(o_, max_lr=0.01, total_steps=30, cycle_momentum=False), [0.01, 0.01]),
        schedule_case("onecycle_linear", lambda o_: ls.OneCycleLR(o_, max_lr=0.5, total_steps=25, pct_start=0.4, anneal_strategy="linear",
                                                                  div_factor=10, final_div_factor=100, cycle_momentum=False), [0.5], steps=24),
    ]
    out = {"torch_version": torch.__version__, "optimizers": cases, "schedulers": schedulers,
           "grouped": grouped, "clips": clips, "schedules": schedules}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "optim_fixtures.json")
    with open(path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
