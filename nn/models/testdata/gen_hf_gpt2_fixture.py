"""Writes the Hugging Face GPT-2 fixture of nn/models' gpt2_hf_test.go and
generate_test.go: a small GPT2LMHeadModel saved with save_pretrained
(hf_gpt2/model.safetensors and config.json), and in hf_gpt2_logits.json
the logits of one input and the ids of greedy generation.

    ~/.cache/gotrain/torch2-venv/bin/python gen_hf_gpt2_fixture.py
"""
import json
import os

import torch
from transformers import GPT2Config, GPT2LMHeadModel

here = os.path.dirname(os.path.abspath(__file__))
out = os.path.join(here, "hf_gpt2")

# A wider initialisation than GPT-2's 0.02 gives the random model logits
# with clear winners, and of the seeds tried the first whose greedy path
# never has two logits within 0.05 is kept, so that greedy decoding in Go
# does not hinge on float rounding.
cfg = GPT2Config(n_layer=2, n_head=2, n_embd=64, n_positions=64, vocab_size=256,
                 initializer_range=0.15, bos_token_id=0, eos_token_id=255)
prompt = torch.tensor([[3, 141, 59, 26, 5]])


def greedy(model):
    with torch.no_grad():
        gen = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                             max_new_tokens=40, min_new_tokens=40, pad_token_id=0)
        full = model(gen[:, :-1]).logits[0, prompt.shape[1] - 1:]
    top2 = full.topk(2, dim=-1).values
    return gen, (top2[:, 0] - top2[:, 1]).min().item()


for seed in range(100):
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(cfg).eval()
    gen, margin = greedy(model)
    if margin >= 0.05:
        break
print("seed", seed, "min greedy margin", margin)
model.save_pretrained(out, safe_serialization=True)
for extra in ("generation_config.json",):
    p = os.path.join(out, extra)
    if os.path.exists(p):
        os.remove(p)

g = torch.Generator().manual_seed(11)
ids = torch.randint(0, cfg.vocab_size, (1, 16), generator=g)
with torch.no_grad():
    logits = model(ids).logits[0]

new = gen[0, prompt.shape[1]:].tolist()

with open(os.path.join(here, "hf_gpt2_logits.json"), "w") as f:
    json.dump({
        "ids": ids[0].tolist(),
        "logits": [round(v, 6) for v in logits.flatten().tolist()],
        "prompt": prompt[0].tolist(),
        "greedy": new,
    }, f)
