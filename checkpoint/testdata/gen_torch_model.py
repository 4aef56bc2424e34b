#!/usr/bin/python3
"""Writes torch_model.safetensors and torch_model_logits.json for the Go
interop test (run with Debian's PyTorch 1.13 from this directory).

The model has nn.Sequential's naming and a BatchNorm1d whose running
statistics and int64 num_batches_tracked come from a few training-mode
batches; the logits are computed in eval mode on fixed inputs.
"""
import json
import os

import torch

from safetensors_py import save_file

HERE = os.path.dirname(os.path.abspath(__file__))


def make_model():
    return torch.nn.Sequential(
        torch.nn.Flatten(),
        torch.nn.Linear(64, 16),
        torch.nn.BatchNorm1d(16),
        torch.nn.ReLU(),
        torch.nn.Linear(16, 10),
    )


def main():
    torch.manual_seed(0)
    model = make_model()
    model.train()
    with torch.no_grad():
        for _ in range(3):
            model(torch.randn(8, 1, 8, 8))
    model.eval()
    x = torch.randn(4, 1, 8, 8)
    with torch.no_grad():
        logits = model(x)
    save_file(model.state_dict(), os.path.join(HERE, "torch_model.safetensors"), {"format": "pt"})
    with open(os.path.join(HERE, "torch_model_logits.json"), "w") as f:
        json.dump({"input_shape": list(x.shape), "input": x.reshape(-1).tolist(),
                   "logits_shape": list(logits.shape), "logits": logits.reshape(-1).tolist()}, f)
        f.write("\n")


if __name__ == "__main__":
    main()
