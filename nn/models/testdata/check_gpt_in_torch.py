#!/usr/bin/python3
"""Loads gotrain_gpt.safetensors (written by gotrain's checkpoint.Save for
a models.GPT) into the nanoGPT-equivalent PyTorch model of
gen_gpt_fixture.py with load_state_dict(strict=True), and checks that its
logits on the committed ids match gotrain's (gotrain_gpt_logits.json).

usage: /usr/bin/python3 nn/models/testdata/check_gpt_in_torch.py
"""
import json, os, sys
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "checkpoint", "testdata"))
import gen_gpt_fixture as g  # noqa: E402
from safetensors_py import load_file  # noqa: E402


def main():
    model = g.GPT()
    sd = load_file(os.path.join(HERE, "gotrain_gpt.safetensors"))
    model.load_state_dict(sd, strict=True)
    assert model.lm_head.weight is model.transformer.wte.weight
    with open(os.path.join(HERE, "gotrain_gpt_logits.json")) as f:
        ref = json.load(f)
    idx = torch.tensor(ref["ids"]).view(ref["B"], ref["T"])
    with torch.no_grad():
        logits, _ = model(idx, torch.zeros_like(idx))
    want = torch.tensor(ref["logits"]).view_as(logits)
    diff = (logits.double() - want).abs().max().item()
    print("max |logit difference| = %.3g" % diff)
    if diff > 1e-4:
        sys.exit("logits differ")
    print("ok: gotrain's GPT checkpoint loads into PyTorch with the same logits")


if __name__ == "__main__":
    main()
