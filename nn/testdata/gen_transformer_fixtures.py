#!/usr/bin/python3
"""Regenerates nn/testdata/transformer_fixtures.json: outputs and gradients
of the transformer layers and ops (LayerNorm, Embedding, causal
self-attention, tanh GELU, scaled-dot-product attention with and without
the causal mask, batched matmul with broadcasting, cross-entropy with
ignore_index) computed by PyTorch (1.13) in float64.

usage: /usr/bin/python3 nn/testdata/gen_transformer_fixtures.py   (from the repository root)

Inputs and weights are drawn in float32 with few significant bits and
widened, so the Go test builds the very same values. PyTorch 1.13 has no
scaled_dot_product_attention: attention is written out with an explicit
mask, as nanoGPT does without flash attention. Only needed to regenerate
the fixtures: the Go tests read the JSON.
"""
import json, math, os
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(4321)
HERE = os.path.dirname(os.path.abspath(__file__))


def rnd(*shape, lo=-1.0, hi=1.0):
    t = torch.rand(*shape, dtype=torch.float32) * (hi - lo) + lo
    return ((t * 1024).round() / 1024).double()


def enc(t):
    t = t.detach()
    return {"shape": list(t.shape), "data": [float(v) for v in t.reshape(-1).tolist()]}


class CausalSelfAttention(nn.Module):
    """nanoGPT's CausalSelfAttention, attention written out (its dropout
    is only printed: the cases run with p = 0)."""
    def __init__(self, n_embd, n_head, dropout=0.0):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = [z.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for z in (q, k, v)]
        y = attention(q, k, v, True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


def attention(q, k, v, causal):
    att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
    if causal:
        tq, tk = q.size(-2), k.size(-2)
        mask = torch.ones(tq, tk, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf"))
    return F.softmax(att, dim=-1) @ v


def module_case(name, mod, x=None, ids=None, ids_shape=None):
    mod = mod.double()
    with torch.no_grad():  # non-trivial affine parameters and biases
        for p in mod.parameters():
            p.copy_(rnd(*p.shape))
    case = {"name": name, "state": {k: enc(v) for k, v in mod.state_dict().items()}}
    if ids is not None:
        y = mod(torch.tensor(ids).view(*ids_shape))
        case["ids"], case["ids_shape"] = ids, ids_shape
    else:
        x = x.requires_grad_(True)
        y = mod(x)
        case["input"] = enc(x)
    gy = rnd(*y.shape)
    y.backward(gy)
    case["grad_output"] = enc(gy)
    case["output"] = enc(y)
    if ids is None:
        case["grad_input"] = enc(x.grad)
    case["param_grads"] = {k: enc(p.grad) for k, p in mod.named_parameters()}
    return case


def op_case(name, fn, inputs, scalar=False, **extra):
    xs = [x.requires_grad_(True) for x in inputs]
    y = fn(*xs)
    case = {"name": name, "inputs": [enc(x) for x in xs], **extra}
    if scalar:
        y.backward()
    else:
        gy = rnd(*y.shape)
        y.backward(gy)
        case["grad_output"] = enc(gy)
    case["output"] = enc(y)
    case["grad_inputs"] = [enc(x.grad) for x in xs]
    return case


class NoBiasLayerNorm(nn.Module):
    """nanoGPT's LayerNorm(bias=False)."""
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, None, 1e-5)


def main():
    cases = [
        module_case("layernorm", nn.LayerNorm(6), x=rnd(2, 3, 6, lo=-3, hi=3)),
        module_case("layernorm_nobias", NoBiasLayerNorm(5), x=rnd(4, 5, lo=-2, hi=2)),
        module_case("embedding", nn.Embedding(7, 4), ids=[2, 5, 2, 0, 6, 2], ids_shape=[2, 3]),
        module_case("causal_self_attention", CausalSelfAttention(8, 2), x=rnd(2, 5, 8)),
        module_case("gelu_tanh", nn.GELU(approximate="tanh"), x=rnd(3, 7, lo=-4, hi=4)),
    ]
    ops = [
        op_case("sdpa_full", lambda q, k, v: attention(q, k, v, False), [rnd(2, 2, 5, 4), rnd(2, 2, 7, 4), rnd(2, 2, 7, 4)]),
        op_case("sdpa_causal", lambda q, k, v: attention(q, k, v, True), [rnd(1, 3, 9, 4), rnd(1, 3, 9, 4), rnd(1, 3, 9, 4)]),
        op_case("matmul_broadcast", lambda a, b: torch.matmul(a, b), [rnd(2, 1, 3, 4), rnd(3, 4, 5)]),
        op_case("matmul_transposed", lambda a, b: torch.matmul(a.transpose(-1, -2), b.transpose(-1, -2)), [rnd(2, 4, 3), rnd(2, 5, 4)]),
    ]
    tgt = [1, -100, 4, 0, -100, 2]
    for red in ("mean", "sum"):
        ops.append(op_case("cross_entropy_ignore_" + red,
                           lambda x: F.cross_entropy(x.view(-1, 5), torch.tensor(tgt), ignore_index=-100, reduction=red),
                           [rnd(2, 3, 5, lo=-3, hi=3)], scalar=True, target=tgt, reduction=red))
    reprs = {
        "layernorm": repr(nn.LayerNorm(6)),
        "layernorm_eps": repr(nn.LayerNorm(3, eps=1e-6)),
        "embedding": repr(nn.Embedding(7, 4)),
        "gelu_tanh": repr(nn.GELU(approximate="tanh")),
        "module_list": repr(nn.ModuleList([nn.LayerNorm(4), nn.Dropout(0.1)])),
        "causal_self_attention": repr(CausalSelfAttention(8, 2, 0.1)),
    }
    with open(os.path.join(HERE, "transformer_fixtures.json"), "w") as f:
        json.dump({"modules": cases, "ops": ops, "reprs": reprs}, f)


if __name__ == "__main__":
    main()
