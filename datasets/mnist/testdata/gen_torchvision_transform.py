#!/usr/bin/env python3
"""Regenerates torchvision_transform.json: for every pixel value 0..255, the
float32 torchvision produces with ToTensor() and with ToTensor() followed
by Normalize((0.1307,), (0.3081,)), as in the PyTorch MNIST examples. The
Go tests check mnist.Dataset.Example gives the same floats bit for bit.

Run with torchvision installed (Debian: python3-torchvision 0.14):
    python3 gen_torchvision_transform.py > torchvision_transform.json
"""
import json

import numpy as np
import torch
import torchvision
from PIL import Image
from torchvision import transforms

pixels = np.arange(256, dtype=np.uint8).reshape(16, 16)
img = Image.fromarray(pixels, mode="L")
to_tensor = transforms.ToTensor()(img).flatten()
normalized = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])(img).flatten()
bits = lambda t: [int(v) for v in t.numpy().view(np.uint32)]
print(json.dumps({"torchvision": torchvision.__version__, "to_tensor": bits(to_tensor),
                  "normalized": bits(normalized)}))
