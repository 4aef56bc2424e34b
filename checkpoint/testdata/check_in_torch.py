#!/usr/bin/python3
"""Loads a gotrain-written model file into the PyTorch model of
gen_torch_model.py with load_state_dict (strict) and compares its eval-mode
logits with those the Go side computed.

    /usr/bin/python3 check_in_torch.py [gotrain_model.safetensors [gotrain_model_logits.json]]

Regenerate the gotrain files with
    go test ./checkpoint -run TestInteropGotrainToTorch -update
"""
import json
import os
import sys

import torch

from gen_torch_model import make_model
from safetensors_py import load_file, save_file

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    model_path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "gotrain_model.safetensors")
    logits_path = sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, "gotrain_model_logits.json")
    sd = load_file(model_path)
    model = make_model()
    model.load_state_dict(sd, strict=True)
    model.eval()
    with open(logits_path) as f:
        ref = json.load(f)
    x = torch.tensor(ref["input"], dtype=torch.float32).reshape(ref["input_shape"])
    want = torch.tensor(ref["logits"], dtype=torch.float32).reshape(ref["logits_shape"])
    with torch.no_grad():
        got = model(x)
    err = ((got - want).abs() / want.abs().clamp(min=1e-3)).max().item()
    nbt = sd["2.num_batches_tracked"]
    print(f"loaded {model_path}: {len(sd)} tensors, num_batches_tracked {nbt.dtype} {nbt.item()}")
    print(f"max relative logit difference vs gotrain: {err:.3g}")
    # Re-serialise with the reference library's layout rules and the
    # file's own metadata (format, and gotrain's per-tensor checksums): a
    # gotrain file must be byte-identical.
    with open(model_path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        metadata = json.loads(f.read(n)).get("__metadata__", {})
    tmp = model_path + ".pycheck"
    save_file(sd, tmp, metadata)
    with open(tmp, "rb") as a, open(model_path, "rb") as b:
        same = a.read() == b.read()
    os.remove(tmp)
    print(f"byte-identical to the reference layout: {same}")
    if err > 1e-5 or not same:
        print("FAIL")
        sys.exit(1)
    print("OK")


if __name__ == "__main__":
    main()
