#!/usr/bin/python3
"""One rank of PyTorch's gloo allreduce across hosts, for comparison with
`gotrain bench allreduce` on the same link (BenchmarkClusterAllreduce).

usage: gloo_allreduce.py SIZES_BYTES...
Reads RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (torchrun's contract) and
GLOO_SOCKET_IFNAME (the interface gloo uses). Rank 0 prints one line per
size in gotrain bench's format:
op=allreduce world= bytes= median_s= algbw_GBps= busbw_GBps=
with busbw = algbw * 2(n-1)/n (nccl-tests), timing as gotrain bench does:
2 warm-up calls, a barrier, then the median of max(3, min(200, 2e8/bytes))
calls.
"""
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist


def main():
    sizes = [int(s) for s in sys.argv[1:]]
    if not sizes:
        sys.exit("usage: gloo_allreduce.py SIZES_BYTES...")
    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    for nbytes in sizes:
        t = torch.arange(nbytes // 4, dtype=torch.float32).remainder_(1000).mul_(1e-3)
        iters = max(3, min(200, int(2e8 // max(nbytes, 1))))
        for _ in range(2):
            dist.all_reduce(t)
        dist.barrier()
        ts = []
        for _ in range(iters):
            s = time.perf_counter()
            dist.all_reduce(t)
            ts.append(time.perf_counter() - s)
        med = statistics.median(ts)
        algbw = nbytes / med / 1e9
        busbw = algbw * 2 * (world - 1) / world
        if rank == 0:
            print(f"op=allreduce world={world} bytes={nbytes} median_s={med:.6f} "
                  f"algbw_GBps={algbw:.3f} busbw_GBps={busbw:.3f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
