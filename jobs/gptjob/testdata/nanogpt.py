"""nanoGPT's GPT (Karpathy), as PyTorch 1.13 and 2.x run it, and the recipe of
gotrain's GPT job: the shared part of the scripts beside this file.

The model is nanoGPT's model.py reduced to what the job uses: pre-LayerNorm
blocks, learned positions, exact-GELU MLP of width 4d, biases on, causal
attention through an explicit mask on PyTorch 1.13 and through
scaled_dot_product_attention (the fused kernel) on 2.x, as nanoGPT chooses,
lm_head tied to wte, nanoGPT's
initialisation. The data and optimizer helpers mirror jobs/gptjob: the byte
tokenizer, the 90/10 split, non-overlapping validation windows, AdamW with
decay on parameters of two or more dimensions only, linear warm-up from
lr/100 then cosine decay to min_lr, clipping.
"""
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
CORPUS = os.path.join(REPO, "datasets", "gotext", "data", "corpus.txt")


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size, dropout):
        super().__init__()
        self.n_head, self.n_embd = n_head, n_embd
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        mask = torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size)
        self.register_buffer("bias", mask, persistent=False)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if hasattr(F, "scaled_dot_product_attention"):
            # PyTorch 2.x: the fused kernel, as nanoGPT uses it.
            p = self.attn_dropout.p if self.training else 0.0
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = self.attn_dropout(F.softmax(att, dim=-1))
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, n_embd, dropout):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * n_embd, n_embd)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size, dropout):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size, dropout)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = MLP(n_embd, dropout)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size=256, block_size=128, n_layer=4, n_head=4, n_embd=128, dropout=0.0):
        super().__init__()
        self.block_size = block_size
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, n_embd),
            wpe=nn.Embedding(block_size, n_embd),
            drop=nn.Dropout(dropout),
            h=nn.ModuleList([Block(n_embd, n_head, block_size, dropout) for _ in range(n_layer)]),
            ln_f=nn.LayerNorm(n_embd),
        ))
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


def corpus_tokens(path=CORPUS):
    """The byte tokens of a corpus file, as text.ByteTokenizer encodes it."""
    with open(path, "rb") as f:
        return torch.tensor(list(f.read()), dtype=torch.long)


def split(tokens):
    """The 90/10 split of gptjob.loadData."""
    n = len(tokens)
    s = n - int(n * 0.1)
    return tokens[:s], tokens[s:]


def window(tokens, start, T):
    return tokens[start:start + T], tokens[start + 1:start + T + 1]


def val_loss(model, val, T, B, batches):
    """The mean loss over the first batches batches of non-overlapping
    validation windows, as gptjob's evaluate."""
    model.eval()
    n = (len(val) - T - 1) // T + 1
    losses = []
    with torch.no_grad():
        for k in range(min(batches, (n + B - 1) // B)):
            idx = range(k * B, min((k + 1) * B, n))
            x = torch.stack([val[i * T:i * T + T] for i in idx])
            y = torch.stack([val[i * T + 1:i * T + T + 1] for i in idx])
            losses.append(model(x, y)[1].item())
    model.train()
    return sum(losses) / len(losses)


def optimizer(model, lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1):
    """AdamW with decay on parameters of two or more dimensions only."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=betas)


def schedule(opt, max_steps, warmup, min_lr):
    """Linear warm-up from lr/100 over warmup steps, then cosine decay to
    min_lr at max_steps, stepped per batch."""
    ls = torch.optim.lr_scheduler
    if warmup == 0:
        return ls.CosineAnnealingLR(opt, T_max=max(max_steps, 1), eta_min=min_lr)
    warm = ls.LinearLR(opt, start_factor=0.01, end_factor=1.0, total_iters=warmup)
    cos = ls.CosineAnnealingLR(opt, T_max=max(max_steps - warmup, 1), eta_min=min_lr)
    return ls.SequentialLR(opt, [warm, cos], milestones=[warmup])
