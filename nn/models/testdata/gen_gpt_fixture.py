#!/usr/bin/python3
"""Writes gpt_small.safetensors (float32 weights of a small GPT, nanoGPT's
architecture and state-dict names, lm_head tied to wte) and gpt_small.json
(a batch, its targets with ignored positions, and the float64 logits, loss
and parameter gradients PyTorch 1.13 computes from those weights).

usage: /usr/bin/python3 nn/models/testdata/gen_gpt_fixture.py  (from the repository root)

The model class below is written for this test to match nanoGPT's GPT
(pre-LayerNorm blocks, learned positions, exact GELU MLP of width 4d,
causal attention through an explicit mask: PyTorch 1.13 has no
scaled_dot_product_attention). Only needed to regenerate the fixture.
"""
import json, math, os, sys
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "checkpoint", "testdata"))
from safetensors_py import save_file  # noqa: E402

VOCAB, BLOCK, NLAYER, NHEAD, NEMBD = 37, 16, 2, 2, 16


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(NEMBD, 3 * NEMBD)
        self.c_proj = nn.Linear(NEMBD, NEMBD)
        self.attn_dropout = nn.Dropout(0.0)
        self.resid_dropout = nn.Dropout(0.0)
        self.register_buffer("bias", torch.tril(torch.ones(BLOCK, BLOCK)).view(1, 1, BLOCK, BLOCK), persistent=False)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(NEMBD, dim=2)
        k = k.view(B, T, NHEAD, C // NHEAD).transpose(1, 2)
        q = q.view(B, T, NHEAD, C // NHEAD).transpose(1, 2)
        v = v.view(B, T, NHEAD, C // NHEAD).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc = nn.Linear(NEMBD, 4 * NEMBD)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * NEMBD, NEMBD)
        self.dropout = nn.Dropout(0.0)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(NEMBD)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(NEMBD)
        self.mlp = MLP()

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(VOCAB, NEMBD),
            wpe=nn.Embedding(BLOCK, NEMBD),
            drop=nn.Dropout(0.0),
            h=nn.ModuleList([Block() for _ in range(NLAYER)]),
            ln_f=nn.LayerNorm(NEMBD),
        ))
        self.lm_head = nn.Linear(NEMBD, VOCAB, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * NLAYER))
        # Non-trivial LayerNorm affine parameters and biases, so the test
        # exercises them too.
        with torch.no_grad():
            for n, p in self.named_parameters():
                if n.endswith(".bias"):
                    p.copy_(torch.randn_like(p) * 0.05)
                elif "ln_" in n and n.endswith(".weight"):
                    p.copy_(1 + torch.randn_like(p) * 0.1)

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss


def enc(t):
    t = t.detach()
    return {"shape": list(t.shape), "data": [float(v) for v in t.reshape(-1).tolist()]}


def main():
    torch.manual_seed(42)
    model = GPT()
    # Scale the weights up from GPT-2's tiny init so that attention is far
    # from uniform and the logits vary: a test of the values, not of zeros.
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith(".weight") and "ln_" not in n:
                p.mul_(10)
    save_file({k: v.clone() for k, v in model.state_dict().items()},
              os.path.join(HERE, "gpt_small.safetensors"), {"format": "pt"})
    B, T = 3, 11  # T below the block size
    idx = torch.randint(0, VOCAB, (B, T))
    targets = torch.randint(0, VOCAB, (B, T))
    targets[0, 3] = -1
    targets[2, 10] = -1
    model = model.double()
    logits, loss = model(idx, targets)
    loss.backward()
    out = {
        "config": {"vocab_size": VOCAB, "block_size": BLOCK, "n_layer": NLAYER, "n_head": NHEAD, "n_embd": NEMBD},
        "B": B, "T": T,
        "ids": idx.reshape(-1).tolist(),
        "targets": targets.reshape(-1).tolist(),
        "logits": enc(logits),
        "loss": float(loss),
        "grads": {n: enc(p.grad) for n, p in model.named_parameters()},
        "state_dict_keys": list(model.state_dict().keys()),
    }
    with open(os.path.join(HERE, "gpt_small.json"), "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
