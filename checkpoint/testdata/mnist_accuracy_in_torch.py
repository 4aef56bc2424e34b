#!/usr/bin/python3
"""Loads a gotrain-saved MNIST model into the same PyTorch model with
load_state_dict (strict) and prints its test accuracy, to compare with the
test_acc gotrain reported (the two must agree: the weights are the same).

    /usr/bin/python3 mnist_accuracy_in_torch.py mlp|cnn MODEL.safetensors MNIST_DIR

MNIST_DIR holds t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz.
"""
import gzip
import os
import struct
import sys

import torch

from safetensors_py import load_file


def mlp():
    return torch.nn.Sequential(
        torch.nn.Flatten(),
        torch.nn.Linear(784, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 10))


def cnn():
    # pytorch/examples' MNIST Net as the Sequential gotrain's models.MNISTNet mirrors.
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 3), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 3), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2), torch.nn.Dropout(0.25), torch.nn.Flatten(),
        torch.nn.Linear(9216, 128), torch.nn.ReLU(), torch.nn.Dropout(0.5),
        torch.nn.Linear(128, 10))


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return torch.frombuffer(bytearray(data[4 + 4 * ndim:]), dtype=torch.uint8).reshape(dims)


def main():
    kind, model_path, mnist_dir = sys.argv[1:4]
    model = {"mlp": mlp, "cnn": cnn}[kind]()
    model.load_state_dict(load_file(model_path), strict=True)
    model.eval()
    x = read_idx(os.path.join(mnist_dir, "t10k-images-idx3-ubyte.gz")).float().div(255)
    x = ((x - 0.1307) / 0.3081).unsqueeze(1)
    y = read_idx(os.path.join(mnist_dir, "t10k-labels-idx1-ubyte.gz")).long()
    with torch.no_grad():
        correct = sum((model(x[i:i + 1000]).argmax(1) == y[i:i + 1000]).sum().item() for i in range(0, len(y), 1000))
    print(f"torch test_acc={correct / len(y):.4f} ({model_path} loaded with load_state_dict, strict)")


if __name__ == "__main__":
    main()
