"""Generates join_fixtures.json: PyTorch's Join over uneven per-rank data.

Each case trains Linear(4,3) -> ReLU -> Linear(3,2) with plain SGD (lr 0.1)
under DistributedDataParallel.join() on `world` gloo CPU processes; rank r
has counts[r] batches of 2 samples. With accum > 1, every step runs accum
forward/backward passes, all but the last inside no_sync(). The file holds
the inputs, the initial weights, every rank's per-pass losses and the final
weights (identical on all ranks after Join's final broadcast).

Run: ~/.cache/gotrain/torch2-venv/bin/python ddp/testdata/join_gen.py
"""
import json
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

CASES = [
    {"name": "w2_div_initial", "world": 2, "counts": [5, 3], "divide_by_initial": True, "accum": 1},
    {"name": "w2_div_active", "world": 2, "counts": [5, 3], "divide_by_initial": False, "accum": 1},
    {"name": "w3_div_initial", "world": 3, "counts": [5, 3, 4], "divide_by_initial": True, "accum": 1},
    {"name": "w3_div_active", "world": 3, "counts": [5, 3, 4], "divide_by_initial": False, "accum": 1},
    {"name": "w2_accum2", "world": 2, "counts": [6, 2], "divide_by_initial": True, "accum": 2},
    {"name": "w3_one_empty", "world": 3, "counts": [4, 0, 2], "divide_by_initial": False, "accum": 1},
    {"name": "w2_rank0_empty", "world": 2, "counts": [0, 3], "divide_by_initial": True, "accum": 1},
]
BATCH = 2
LR = 0.1


def model_and_data(case):
    g = torch.Generator().manual_seed(1234)
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.rand(p.shape, generator=g) - 0.5)
    data = []
    for c in case["counts"]:
        xs = (torch.rand(c * case["accum"], BATCH, 4, generator=g) * 2 - 1)
        ys = torch.randint(0, 2, (c * case["accum"], BATCH), generator=g)
        data.append((xs, ys))
    return model, data


def worker(rank, case, port, out):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=case["world"])
    torch.manual_seed(0)
    model, data = model_and_data(case)
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=LR)
    xs, ys = data[rank]
    losses = []
    with ddp.join(divide_by_initial_world_size=case["divide_by_initial"]):
        for s in range(case["counts"][rank]):
            opt.zero_grad()
            for k in range(case["accum"]):
                i = s * case["accum"] + k
                if k < case["accum"] - 1:
                    with ddp.no_sync():
                        loss = nn.functional.cross_entropy(ddp(xs[i]), ys[i])
                        loss.backward()
                else:
                    loss = nn.functional.cross_entropy(ddp(xs[i]), ys[i])
                    loss.backward()
                losses.append(loss.item())
            opt.step()
    out[rank] = {"losses": losses, "final": [p.detach().flatten().tolist() for p in model.parameters()]}
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    result = {"generator": "ddp/testdata/join_gen.py", "torch": torch.__version__, "batch": BATCH, "lr": LR, "cases": []}
    for case in CASES:
        model, data = model_and_data(case)
        with mp.Manager() as mgr:
            out = mgr.dict()
            mp.spawn(worker, args=(case, free_port(), out), nprocs=case["world"], join=True)
            ranks = [out[r] for r in range(case["world"])]
        for r in ranks[1:]:
            assert r["final"] == ranks[0]["final"], "replicas differ after Join"
        result["cases"].append({
            **case,
            "initial": [p.detach().flatten().tolist() for p in model.parameters()],
            "x": [d[0].flatten().tolist() for d in data],
            "y": [d[1].flatten().tolist() for d in data],
            "losses": [r["losses"] for r in ranks],
            "final": ranks[0]["final"],
        })
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "join_fixtures.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    print("wrote", path, file=sys.stderr)


if __name__ == "__main__":
    main()
