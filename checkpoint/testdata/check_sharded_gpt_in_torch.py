#!/usr/bin/python3
"""Loads the model file `gotrain checkpoint consolidate` wrote for a
sharded checkpoint of nn/models' fixture GPT into the nanoGPT-equivalent
PyTorch model (nn/models/testdata/gen_gpt_fixture.py) with
load_state_dict(strict=True), and checks its logits on the committed ids
against gotrain's (nn/models/testdata/gotrain_gpt_logits.json).

usage: python3 checkpoint/testdata/check_sharded_gpt_in_torch.py [model.safetensors]

The default file, sharded_gpt_consolidated.safetensors, is rewritten by
    go test ./checkpoint -run TestShardedGPTConsolidatesForPyTorch -update
"""
import json, os, sys
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "..", "..", "nn", "models", "testdata")
sys.path.insert(0, HERE)
sys.path.insert(0, MODELS)
import gen_gpt_fixture as g  # noqa: E402
from safetensors_py import load_file  # noqa: E402


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "sharded_gpt_consolidated.safetensors")
    model = g.GPT()
    model.load_state_dict(load_file(path), strict=True)
    with open(os.path.join(MODELS, "gotrain_gpt_logits.json")) as f:
        ref = json.load(f)
    idx = torch.tensor(ref["ids"]).view(ref["B"], ref["T"])
    with torch.no_grad():
        logits, _ = model(idx, torch.zeros_like(idx))
    want = torch.tensor(ref["logits"]).view_as(logits)
    diff = (logits.double() - want).abs().max().item()
    print("max |logit difference| = %.3g" % diff)
    if diff > 1e-4:
        sys.exit("logits differ")
    print("ok: %s loads into PyTorch's GPT with gotrain's logits" % os.path.basename(path))


if __name__ == "__main__":
    main()
