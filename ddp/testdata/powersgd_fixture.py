"""Writes powersgd_rank2.json: PyTorch's powerSGD_hook on one bucket.

Run with the PyTorch venv from the repository root:
    python ddp/testdata/powersgd_fixture.py

One process (world size 1, gloo) runs the hook on a bucket of four
gradients for five steps (two of plain allreduce, then three compressed,
with error feedback and warm start). The file holds the layout, each
step's input and output, the random Q matrices the hook drew (before
orthogonalisation) and the final error, for TestPowerSGDMatchesPyTorch.
"""
import json
import os
import tempfile

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

SHAPES = [[8, 6], [8], [4, 2, 2, 2], [5, 8]]
RANK, START, MIN_RATE, STEPS = 2, 2, 1.0, 5


class Bucket:
    """The part of dist.GradBucket the hook uses."""

    def __init__(self, buf, shapes):
        self.buf = buf
        self.grads, off = [], 0
        for s in shapes:
            n = 1
            for d in s:
                n *= d
            self.grads.append(buf[off:off + n].view(*s))
            off += n

    def buffer(self):
        return self.buf

    def index(self):
        return 0

    def gradients(self):
        return self.grads

    def is_last(self):
        return True


def main():
    store = tempfile.NamedTemporaryFile(delete=False)
    dist.init_process_group("gloo", init_method="file://" + store.name, rank=0, world_size=1)
    drawn = []
    orth = psgd._orthogonalize

    def recording(matrices, epsilon=0):
        drawn.append(matrices.detach().clone())
        orth(matrices, epsilon)

    psgd._orthogonalize = recording
    state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=RANK, start_powerSGD_iter=START,
                               min_compression_rate=MIN_RATE, use_error_feedback=True, warm_start=True)
    total = sum(torch.Size(s).numel() for s in SHAPES)
    gen = torch.Generator().manual_seed(42)
    steps, q_init = [], None
    for step in range(STEPS):
        x = torch.randn(total, generator=gen)
        buf = x.clone()
        drawn.clear()
        out = psgd.powerSGD_hook(state, Bucket(buf, SHAPES)).wait()
        if step == START:
            # The first calls orthogonalise the fresh Qs, one per matrix
            # compressed (all but the bias here), in bucket order.
            q_init = [q.reshape(-1).tolist() for q in drawn[:3]]
        steps.append({"input": x.tolist(), "output": out.tolist()})
    fixture = {"shapes": SHAPES, "rank": RANK, "start_iter": START, "min_compression_rate": MIN_RATE,
               "q_init": q_init, "steps": steps, "error": state.error_dict[0].tolist()}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "powersgd_rank2.json")
    with open(path, "w") as f:
        json.dump(fixture, f)
    dist.destroy_process_group()
    if os.path.exists(store.name):
        os.unlink(store.name)


if __name__ == "__main__":
    main()
