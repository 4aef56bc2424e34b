#!/usr/bin/python3
"""Writes the GPT parity fixture: parity_init.safetensors (the initial
weights of the default GPT, nanoGPT's initialisation from seed 1337) and
parity.json (the start offsets of 20 global batches of training windows of
the shipped corpus, and the loss PyTorch 1.13 computes at each of 20 AdamW
steps from those weights on those batches, with the job's recipe).

usage: /usr/bin/python3 jobs/gptjob/testdata/gen_parity.py  (from the repository root)

The Go test (jobs/gptjob/parity_test.go) replays the same steps with one
process taking the global batch and with two DDP ranks taking half each.
"""
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "checkpoint", "testdata"))
import nanogpt  # noqa: E402
from safetensors_py import save_file  # noqa: E402

STEPS, GLOBAL_BATCH, T = 20, 4, 128
LR, MIN_LR, WARMUP, CLIP = 1e-3, 1e-4, 5, 1.0


def main():
    torch.manual_seed(1337)
    model = nanogpt.GPT()  # the default GPT: 4 layers, 4 heads, width 128, block 128
    save_file({k: v.detach().clone().contiguous() for k, v in model.state_dict().items()},
              os.path.join(HERE, "parity_init.safetensors"), {"format": "pt"})
    train, _ = nanogpt.split(nanogpt.corpus_tokens())
    g = torch.Generator().manual_seed(7)
    offsets = torch.randint(0, len(train) - T, (STEPS, GLOBAL_BATCH), generator=g)
    opt = nanogpt.optimizer(model, lr=LR)
    sched = nanogpt.schedule(opt, STEPS, WARMUP, MIN_LR)
    losses, lrs = [], []
    for step in range(STEPS):
        x = torch.stack([train[o:o + T] for o in offsets[step].tolist()])
        y = torch.stack([train[o + 1:o + T + 1] for o in offsets[step].tolist()])
        opt.zero_grad(set_to_none=True)
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        sched.step()
        losses.append(loss.item())
        lrs.append(opt.param_groups[0]["lr"])
    out = {
        "torch_version": torch.__version__,
        "steps": STEPS, "global_batch": GLOBAL_BATCH, "block_size": T,
        "lr": LR, "min_lr": MIN_LR, "warmup": WARMUP, "clip": CLIP,
        "offsets": offsets.tolist(), "losses": losses, "lrs": lrs,
    }
    with open(os.path.join(HERE, "parity.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print("losses", " ".join("%.5f" % v for v in losses))


if __name__ == "__main__":
    main()
