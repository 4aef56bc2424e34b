"""The MNIST job of `gotrain train mnist` in PyTorch, for side-by-side speed.

The same models (the MLP 784-512-512-10, and pytorch/examples' Net), the
same optimizers (SGD lr 0.01 momentum 0.9 scaled by the world size for the
MLP; Adadelta lr 1.0 with StepLR 0.7 for the CNN), batch 64 per rank,
DistributedSampler, DDP over gloo with --world workers on this machine, one
thread each (OMP_NUM_THREADS, as torchrun sets it). --precision bf16 runs
forward and loss under torch.autocast('cpu', dtype=torch.bfloat16), as
gotrain's --precision bf16 runs its matmuls and convolutions. Reads the
IDX files gotrain ships (datasets/mnist/data). Prints one line:

    model= world= steps= samples_per_s= train_loss= precision= torch= compile=

samples/s counts every rank's samples after the first 10 steps, over the
wall time of the slowest rank.
"""
import argparse, gzip, os, socket, struct, time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "..", "datasets", "mnist", "data")


def idx(name):
    with gzip.open(os.path.join(DATA, name)) as f:
        magic = struct.unpack(">I", f.read(4))[0]
        dims = struct.unpack(">" + "I" * (magic & 0xFF), f.read(4 * (magic & 0xFF)))
        return np.frombuffer(f.read(), dtype=np.uint8).reshape(dims)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(784, 512), nn.Linear(512, 512), nn.Linear(512, 10)

    def forward(self, x):
        x = torch.flatten(x, 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class Net(nn.Module):  # pytorch/examples mnist
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 32, 3, 1), nn.Conv2d(32, 64, 3, 1)
        self.dropout1, self.dropout2 = nn.Dropout(0.25), nn.Dropout(0.5)
        self.fc1, self.fc2 = nn.Linear(9216, 128), nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
        x = self.dropout2(F.relu(self.fc1(torch.flatten(self.dropout1(x), 1))))
        return F.log_softmax(self.fc2(x), dim=1)


def train(a):
    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo")
    torch.manual_seed(1)
    x = torch.from_numpy(idx("train-images-idx3-ubyte.gz").astype(np.float32) / 255.0)
    x = ((x - 0.1307) / 0.3081).unsqueeze(1)
    y = torch.from_numpy(idx("train-labels-idx1-ubyte.gz").astype(np.int64))
    ds = TensorDataset(x, y)
    sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True, seed=1)
    loader = DataLoader(ds, batch_size=64, sampler=sampler)
    model = MLP() if a.model == "mlp" else Net()
    fwd = torch.compile(model) if a.compile else model
    fwd = DDP(fwd) if world > 1 else fwd
    if a.model == "mlp":
        opt = torch.optim.SGD(model.parameters(), lr=0.01 * world, momentum=0.9)
        loss_fn = nn.CrossEntropyLoss()
    else:
        opt = torch.optim.Adadelta(model.parameters(), lr=1.0)
        loss_fn = nn.NLLLoss()
    step, start, counted, loss = 0, None, 0, 0.0
    for xb, yb in loader:
        if step == 10:
            if world > 1:
                dist.barrier()
            start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            l = loss_fn(fwd(xb), yb)
        l.backward()
        opt.step()
        loss = l.item()
        step += 1
        if start is not None:
            counted += xb.shape[0]
        if a.max_steps and step >= a.max_steps:
            break
    if world > 1:
        dist.barrier()
    took = time.perf_counter() - start
    if world > 1:
        t = torch.tensor([counted, took], dtype=torch.float64)
        counts = torch.tensor([counted], dtype=torch.float64)
        dist.all_reduce(counts)
        dist.all_reduce(t[1:], op=dist.ReduceOp.MAX)
        counted, took = counts.item(), t[1].item()
    if rank == 0:
        print("model=%s world=%d steps=%d samples_per_s=%.0f train_loss=%.4f precision=%s torch=%s compile=%s" % (
            a.model, world, step, counted / took, loss, a.precision, torch.__version__.split("+")[0], a.compile),
            flush=True)
    if world > 1:
        dist.destroy_process_group()


def worker(rank, a, port):
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(a.world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    train(a)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=("mlp", "cnn"), default="mlp")
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=0, help="stop after N steps per rank (0: one epoch)")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                    help="bf16: torch.autocast('cpu', dtype=torch.bfloat16) around forward and loss")
    a = ap.parse_args()
    if a.world > 1:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.start_processes(worker, args=(a, port), nprocs=a.world, start_method="spawn")
        return
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    train(a)


if __name__ == "__main__":
    main()
