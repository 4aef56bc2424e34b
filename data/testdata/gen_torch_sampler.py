#!/usr/bin/env python3
"""Regenerates torch_distributed_sampler.json: the shards PyTorch's
DistributedSampler yields, and the torch.randperm permutations it used, so
the Go tests check gotrain's sampler against PyTorch itself.

Run with PyTorch installed (Debian: python3-torch 1.13):
    python3 gen_torch_sampler.py > torch_distributed_sampler.json
"""
import json

import torch
from torch.utils.data.distributed import DistributedSampler

cases = []
for n in [0, 1, 2, 7, 10, 13, 100]:
    for replicas in range(1, 8):
        for drop_last in [False, True]:
            for shuffle, seed, epoch in [(False, 0, 0), (True, 0, 0), (True, 5, 3)]:
                shards = []
                for rank in range(replicas):
                    s = DistributedSampler(range(n), num_replicas=replicas, rank=rank,
                                           shuffle=shuffle, seed=seed, drop_last=drop_last)
                    s.set_epoch(epoch)
                    shards.append(list(s))
                    num_samples, total_size = s.num_samples, s.total_size
                perm = None
                if shuffle:
                    g = torch.Generator()
                    g.manual_seed(seed + epoch)
                    perm = torch.randperm(n, generator=g).tolist()
                cases.append(dict(n=n, replicas=replicas, drop_last=drop_last, shuffle=shuffle,
                                  seed=seed, epoch=epoch, num_samples=num_samples,
                                  total_size=total_size, perm=perm, shards=shards))
print(json.dumps({"torch": torch.__version__, "cases": cases}, separators=(",", ":")))
