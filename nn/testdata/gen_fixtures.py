#!/usr/bin/python3
"""Regenerates nn/testdata/fixtures.json: layer outputs and gradients computed
by PyTorch (1.13) in float64, and the state-dict keys of reference models.

usage: /usr/bin/python3 nn/testdata/gen_fixtures.py   (from the repository root)

Inputs and weights are drawn in float32 and then widened, so the Go test can
build the very same float32 values; every computation here runs in float64,
giving the float64 reference the Go test compares with (relative 1e-5).
Only needed to regenerate the fixtures: the Go tests read the JSON.
"""
import json, os
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(1234)


def rnd(*shape, lo=-1.0, hi=1.0):
    # Values with few significant bits, so they are exact in float32.
    t = torch.rand(*shape, dtype=torch.float32) * (hi - lo) + lo
    return (t * 1024).round() / 1024


def enc(t):
    t = t.detach()
    return {"shape": list(t.shape), "data": [float(v) for v in t.reshape(-1).tolist()]}


def layer_case(name, mod, x, train=True, state=None, loss=None, target=None):
    """Runs mod on x in float64 and records everything the Go test needs."""
    mod = mod.double()
    with torch.no_grad():
        for k, v in (state or {}).items():
            mod.state_dict()[k].copy_(v)
    mod.train(train)
    full_state = {k: enc(v) for k, v in mod.state_dict().items()}
    x64 = x.double().requires_grad_(True)
    y = mod(x64)
    case = {"name": name, "train": train, "state": full_state, "input": enc(x)}
    if loss is None:
        gy = rnd(*y.shape)
        y.backward(gy.double())
        case["grad_output"] = enc(gy)
    else:
        y = loss(y, torch.tensor(target))
        y.backward()
        case["target"] = target
    case["output"] = enc(y)
    case["grad_input"] = enc(x64.grad)
    case["param_grads"] = {k: enc(p.grad) for k, p in mod.named_parameters()}
    case["state_after"] = {k: enc(v) for k, v in mod.state_dict().items()}
    return case


def keys(mod):
    return [[k, list(v.shape), str(v.dtype).replace("torch.", "")] for k, v in mod.state_dict().items()]


class Custom(nn.Module):
    """A user-defined module: named children, a nested Sequential, no-bias layer."""
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(10, 8)
        self.bn = nn.BatchNorm1d(8)
        self.head = nn.Sequential(nn.ReLU(), nn.Linear(8, 4, bias=False), nn.Linear(4, 2))

    def forward(self, x):
        return self.head(self.bn(self.fc1(x)))


def main():
    cases = []
    cases.append(layer_case("linear", nn.Linear(5, 3), rnd(4, 5)))
    cases.append(layer_case("linear_nobias_3d", nn.Linear(5, 3, bias=False), rnd(2, 3, 5)))
    cases.append(layer_case("conv_s2p1", nn.Conv2d(3, 4, 3, stride=2, padding=1), rnd(2, 3, 7, 6)))
    cases.append(layer_case("conv_nobias", nn.Conv2d(2, 3, 2, bias=False), rnd(1, 2, 5, 4)))
    cases.append(layer_case("maxpool2", nn.MaxPool2d(2), rnd(2, 3, 6, 5)))
    cases.append(layer_case("maxpool3_s2p1", nn.MaxPool2d(3, stride=2, padding=1), rnd(1, 2, 7, 7)))
    cases.append(layer_case("avgpool2", nn.AvgPool2d(2), rnd(2, 3, 6, 5)))
    cases.append(layer_case("avgpool3_s2p1", nn.AvgPool2d(3, stride=2, padding=1), rnd(1, 2, 7, 7)))
    bn_state = lambda n: {"weight": rnd(n, lo=0.5, hi=1.5), "bias": rnd(n),
                          "running_mean": rnd(n), "running_var": rnd(n, lo=0.5, hi=2.0),
                          "num_batches_tracked": torch.tensor(3)}
    cases.append(layer_case("bn1d_train", nn.BatchNorm1d(4), rnd(6, 4), state=bn_state(4)))
    cases.append(layer_case("bn1d_train_3d", nn.BatchNorm1d(3), rnd(2, 3, 5), state=bn_state(3)))
    cases.append(layer_case("bn1d_eval", nn.BatchNorm1d(4), rnd(6, 4), train=False, state=bn_state(4)))
    cases.append(layer_case("bn2d_train", nn.BatchNorm2d(3), rnd(2, 3, 4, 5), state=bn_state(3)))
    cases.append(layer_case("bn2d_eval", nn.BatchNorm2d(3), rnd(2, 3, 4, 5), train=False, state=bn_state(3)))
    cases.append(layer_case("relu", nn.ReLU(), rnd(3, 7)))
    cases.append(layer_case("gelu", nn.GELU(), rnd(3, 7, lo=-4, hi=4)))
    cases.append(layer_case("logsoftmax1", nn.LogSoftmax(1), rnd(3, 5, lo=-3, hi=3)))
    cases.append(layer_case("logsoftmax0", nn.LogSoftmax(0), rnd(3, 5, lo=-3, hi=3)))
    cases.append(layer_case("softmax1", nn.Softmax(1), rnd(3, 5, lo=-3, hi=3)))
    cases.append(layer_case("flatten", nn.Flatten(), rnd(2, 3, 2, 2)))
    seq = lambda: nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 4))
    target = [0, 3, 1, 3, 2]
    cases.append(layer_case("seq_cross_entropy_mean", seq(), rnd(5, 6), loss=F.cross_entropy, target=target))
    cases.append(layer_case("seq_cross_entropy_sum", seq(), rnd(5, 6),
                            loss=lambda y, t: F.cross_entropy(y, t, reduction="sum"), target=target))
    cases.append(layer_case("seq_nll_mean", nn.Sequential(nn.Linear(6, 4), nn.LogSoftmax(1)), rnd(5, 6),
                            loss=F.nll_loss, target=target))
    # Appended last so that the cases above keep their values.
    cases.append(layer_case("conv_dilation2_groups2", nn.Conv2d(4, 6, 3, padding=2, dilation=2, groups=2), rnd(2, 4, 7, 6)))
    cases.append(layer_case("conv_depthwise_s2", nn.Conv2d(3, 3, 3, stride=2, padding=1, groups=3, bias=False), rnd(1, 3, 7, 7)))

    mlp = nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    cnn = nn.Sequential(nn.Conv2d(1, 32, 3, 1), nn.ReLU(), nn.Conv2d(32, 64, 3, 1), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Dropout(0.25), nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(), nn.Dropout(0.5), nn.Linear(128, 10))
    bnnet = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                          nn.Linear(4 * 14 * 14, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 10))
    state_dicts = {"mlp": keys(mlp), "mnist_net": keys(cnn), "bn_net": keys(bnnet), "custom": keys(Custom())}

    reprs = {"mlp": str(mlp), "mnist_net": str(cnn), "bn_net": str(bnnet),
             "conv_dilation_groups": str(nn.Conv2d(4, 6, 3, padding=2, dilation=(2, 1), groups=2, bias=False))}

    out = {"torch_version": torch.__version__, "cases": cases, "state_dicts": state_dicts, "reprs": reprs}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures.json")
    with open(path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print("wrote", path, "with", len(cases), "layer cases")


if __name__ == "__main__":
    main()
