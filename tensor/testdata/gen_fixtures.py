#!/usr/bin/env python3
"""Generate PyTorch reference fixtures for the tensor package's tests.

Run with Debian's PyTorch 1.13 from the repository root:

    /usr/bin/python3 tensor/testdata/gen_fixtures.py

Each case is written to tensor/testdata/<name>.json holding the inputs, the
op's parameters, the output, an upstream gradient "gout" and the gradients
of sum(output * gout) with respect to the inputs (and, for batch norm, the
running statistics after the call). All values are float32 written with
enough digits to round-trip.
"""

import json
import os

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))


def flat(t):
    return [float(v) for v in t.detach().reshape(-1).tolist()]


def tensor_entry(t):
    return {"shape": list(t.shape), "data": flat(t)}


def run(name, inputs, fn, params, extra=None):
    """Evaluate fn on leaf copies of inputs and save everything as JSON."""
    leaves = {k: v.clone().requires_grad_(True) for k, v in inputs.items()}
    out = fn(**leaves)
    gout = torch.randn(out.shape) if out.dim() > 0 else torch.tensor(1.0)
    (out * gout).sum().backward()
    doc = {
        "params": params,
        "inputs": {k: tensor_entry(v) for k, v in inputs.items()},
        "output": tensor_entry(out),
        "gout": tensor_entry(gout),
        "grads": {k: tensor_entry(v.grad) for k, v in leaves.items()},
    }
    if extra:
        doc.update({k: tensor_entry(v) if torch.is_tensor(v) else v for k, v in extra.items()})
    with open(os.path.join(HERE, name + ".json"), "w") as f:
        json.dump(doc, f, indent=None, separators=(",", ":"))
        f.write("\n")


def main():
    torch.manual_seed(1234)

    run("conv2d_s2_p1",
        {"x": torch.randn(2, 3, 7, 6), "w": torch.randn(4, 3, 3, 3), "b": torch.randn(4)},
        lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1),
        {"stride": [2, 2], "padding": [1, 1]})

    run("max_pool2d_k3_s2_p1", {"x": torch.randn(2, 2, 7, 6)},
        lambda x: F.max_pool2d(x, 3, stride=2, padding=1),
        {"kernel": [3, 3], "stride": [2, 2], "padding": [1, 1]})
    run("max_pool2d_k2", {"x": torch.randn(2, 3, 6, 8)},
        lambda x: F.max_pool2d(x, 2),
        {"kernel": [2, 2], "stride": [2, 2], "padding": [0, 0]})
    run("avg_pool2d_k3_s2_p1", {"x": torch.randn(2, 2, 7, 6)},
        lambda x: F.avg_pool2d(x, 3, stride=2, padding=1),
        {"kernel": [3, 3], "stride": [2, 2], "padding": [1, 1]})

    for shape, tag in (((4, 3, 3, 3), "2d"), ((6, 4), "1d")):
        c = shape[1]
        x = torch.randn(*shape) * 2 + 0.5
        w, b = torch.rand(c) + 0.5, torch.randn(c)
        rm0, rv0 = torch.randn(c) * 0.1, torch.rand(c) + 0.5
        for training in (True, False):
            rm, rv = rm0.clone(), rv0.clone()
            run("batch_norm_%s_%s" % (tag, "train" if training else "eval"),
                {"x": x, "w": w, "b": b},
                lambda x, w, b: F.batch_norm(x, rm, rv, w, b, training=training, momentum=0.1, eps=1e-5),
                {"training": training, "momentum": 0.1, "eps": 1e-5},
                {"running_mean_before": rm0, "running_var_before": rv0,
                 "running_mean_after": rm, "running_var_after": rv})

    run("gelu", {"x": torch.linspace(-5, 5, 41)}, lambda x: F.gelu(x), {})
    run("log_softmax_dim1", {"x": torch.randn(3, 5) * 3}, lambda x: F.log_softmax(x, dim=1), {"dim": 1})
    run("log_softmax_dim0", {"x": torch.randn(4, 3) * 3}, lambda x: F.log_softmax(x, dim=0), {"dim": 0})
    run("linear", {"x": torch.randn(5, 4), "w": torch.randn(3, 4), "b": torch.randn(3)},
        lambda x, w, b: F.linear(x, w, b), {})

    logits = torch.randn(6, 7) * 2
    target = torch.randint(0, 7, (6,))
    for reduction in ("mean", "sum"):
        run("cross_entropy_" + reduction, {"x": logits},
            lambda x: F.cross_entropy(x, target, reduction=reduction),
            {"reduction": reduction, "target": target.tolist()})

    # Drawn last so that the cases above keep their values.
    run("conv2d_dilation2_p2",
        {"x": torch.randn(2, 3, 9, 8), "w": torch.randn(4, 3, 3, 3), "b": torch.randn(4)},
        lambda x, w, b: F.conv2d(x, w, b, stride=1, padding=2, dilation=2),
        {"stride": [1, 1], "padding": [2, 2], "dilation": [2, 2], "groups": 1})
    run("conv2d_groups2_s2_d3x2",
        {"x": torch.randn(2, 4, 11, 9), "w": torch.randn(6, 2, 3, 2), "b": torch.randn(6)},
        lambda x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=(1, 0), dilation=(3, 2), groups=2),
        {"stride": [2, 1], "padding": [1, 0], "dilation": [3, 2], "groups": 2})
    run("conv2d_depthwise_p1",
        {"x": torch.randn(2, 3, 6, 7), "w": torch.randn(6, 1, 3, 3), "b": torch.randn(6)},
        lambda x, w, b: F.conv2d(x, w, b, stride=1, padding=1, groups=3),
        {"stride": [1, 1], "padding": [1, 1], "dilation": [1, 1], "groups": 3})


if __name__ == "__main__":
    main()
