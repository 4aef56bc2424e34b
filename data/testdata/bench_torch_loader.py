#!/usr/bin/env python3
"""Anchor for BenchmarkLoaderEpoch (datasets/mnist): one DDP rank's epoch of
batches from PyTorch's DataLoader, as torch_ddp_mnist.py builds it
(TensorDataset of normalised float32 images, DistributedSampler of 2
replicas, batch 64, no worker processes), with nothing done per batch.

usage: OMP_NUM_THREADS=1 /usr/bin/python3 bench_torch_loader.py MNIST_DIR
"""
import gzip, os, struct, sys, time

import numpy as np
import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def read_idx(path):
    with gzip.open(path + ".gz", "rb") as f:
        raw = f.read()
    nd = struct.unpack(">I", raw[:4])[0] & 0xFF
    dims = struct.unpack(">" + "I" * nd, raw[4:4 + 4 * nd])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * nd).reshape(dims)


torch.set_num_threads(1)
d = sys.argv[1]
t = time.perf_counter()
x = (read_idx(os.path.join(d, "train-images-idx3-ubyte")).astype(np.float32) / 255.0 - 0.1307) / 0.3081
y = read_idx(os.path.join(d, "train-labels-idx1-ubyte")).astype(np.int64)
ds = TensorDataset(torch.from_numpy(x).unsqueeze(1), torch.from_numpy(y))
load_s = time.perf_counter() - t
sampler = DistributedSampler(ds, num_replicas=2, rank=0, shuffle=True, seed=0)
dl = DataLoader(ds, batch_size=64, sampler=sampler)
best = float("inf")
for epoch in range(3):
    sampler.set_epoch(epoch)
    t = time.perf_counter()
    for xb, yb in dl:
        pass
    best = min(best, time.perf_counter() - t)
print(f"torch load_train_s={load_s:.3f} epoch_s={best:.4f} samples_per_s={len(sampler) / best:.0f}")
