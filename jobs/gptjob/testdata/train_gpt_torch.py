#!/usr/bin/python3
"""`gotrain train gpt` in PyTorch (1.13 or 2.x): the same model (nanoGPT's), data,
recipe, evaluation and summary line, for the side-by-side comparisons of
tokens/s, peak RSS and validation loss.

    # one process, one thread (the best OpenBLAS kernels: see DESIGN.md)
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 /usr/bin/python3 jobs/gptjob/testdata/train_gpt_torch.py --max-steps 1000
    # two DDP workers (gloo), one thread each, started as torchrun would
    # (Debian's torchrun fails on Python 3.12); under torchrun, leave --world out
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 /usr/bin/python3 jobs/gptjob/testdata/train_gpt_torch.py --world 2 --max-steps 1000

It prints `step N: train_loss= val_loss= lr=` every --eval-every steps and
last the summary `model=gpt world= steps= tokens_per_s= train_loss= val_loss=
peak_rss_mib=`, measured as gotrain measures it: tokens/s of all ranks over
the steps after the first 5, evaluation excluded; train_loss the mean over
the ranks' steps of the last evaluation interval; val_loss the mean over the
first --eval-batches batches of non-overlapping held-out windows; peak RSS
of rank 0. Flags take gotrain's names and defaults.
"""
import argparse
import os
import resource
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "checkpoint", "testdata"))
import nanogpt  # noqa: E402

WARMUP_STEPS_UNTIMED = 5


class Windows(Dataset):
    """A window at every position of tokens, with next-token targets."""

    def __init__(self, tokens, T):
        self.tokens, self.T = tokens, T

    def __len__(self):
        return len(self.tokens) - self.T

    def __getitem__(self, i):
        return self.tokens[i:i + self.T], self.tokens[i + 1:i + self.T + 1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=128)
    ap.add_argument("--block-size", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-steps", type=int, default=1000)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--min-lr", type=float, default=None)
    ap.add_argument("--warmup-steps", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--eval-batches", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data", default=nanogpt.CORPUS)
    ap.add_argument("--init", default="", help="initial weights (safetensors), e.g. saved by gotrain")
    ap.add_argument("--world", type=int, default=1, help="start this many DDP workers on this machine")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (PyTorch 2.x; Inductor's C++ kernels)")
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                    help="bf16: torch.autocast('cpu', dtype=torch.bfloat16) around forward and loss")
    ap.add_argument("--powersgd-rank", type=int, default=0,
                    help="with --world > 1: PyTorch's powerSGD_hook of this rank (0: plain allreduce)")
    ap.add_argument("--powersgd-start-iter", type=int, default=10)
    a = ap.parse_args()
    if a.world > 1 and "RANK" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.start_processes(worker, args=(a, port), nprocs=a.world, start_method="spawn")
        return
    train(a)


def worker(rank, a, port):
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(a.world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    train(a)


def train(a):
    min_lr = a.lr / 10 if a.min_lr is None else a.min_lr
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo")
    torch.manual_seed(a.seed)
    model = nanogpt.GPT(256, a.block_size, a.n_layer, a.n_head, a.n_embd)
    if a.init:
        from safetensors_py import load_file
        model.load_state_dict(load_file(a.init))
    fwd = torch.compile(model) if a.compile else model
    fwd = DDP(fwd) if world > 1 else fwd
    if world > 1 and a.powersgd_rank > 0:
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
        fwd.register_comm_hook(psgd.PowerSGDState(process_group=None, matrix_approximation_rank=a.powersgd_rank,
                                                  start_powerSGD_iter=a.powersgd_start_iter, min_compression_rate=2,
                                                  use_error_feedback=True, warm_start=True), psgd.powerSGD_hook)

    train, val = nanogpt.split(nanogpt.corpus_tokens(a.data))
    ds = Windows(train, a.block_size)
    sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True, seed=a.seed)
    loader = DataLoader(ds, batch_size=a.batch_size, sampler=sampler, drop_last=True)
    opt = nanogpt.optimizer(model, lr=a.lr, weight_decay=a.weight_decay)
    sched = nanogpt.schedule(opt, a.max_steps, a.warmup_steps, min_lr)

    step, counted, counting, start = 0, 0, 0.0, None
    loss_sum, loss_steps, train_loss, val_loss = 0.0, 0, 0.0, 0.0
    epoch = 0
    while step < a.max_steps:
        sampler.set_epoch(epoch)
        for x, y in loader:
            if step == WARMUP_STEPS_UNTIMED:
                if world > 1:
                    dist.barrier()
                start, counted, counting = time.perf_counter(), 0, 0.0
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
                _, loss = fwd(x, y)
            loss.backward()
            if a.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
            opt.step()
            sched.step()
            step += 1
            counted += x.numel()
            loss_sum += loss.item()
            loss_steps += 1
            if step % a.eval_every == 0 or step == a.max_steps:
                paused = time.perf_counter()
                mean = torch.tensor([loss_sum / loss_steps], dtype=torch.float64)
                if world > 1:
                    dist.all_reduce(mean)
                    mean /= world
                train_loss, loss_sum, loss_steps = mean.item(), 0.0, 0
                if rank == 0:
                    val_loss = nanogpt.val_loss(model, val, a.block_size, a.batch_size, a.eval_batches)
                    print("step %d: train_loss=%.4f val_loss=%.4f lr=%.3g" % (step, train_loss, val_loss,
                          opt.param_groups[0]["lr"]), file=sys.stderr, flush=True)
                if start is not None:
                    start += time.perf_counter() - paused
            if step == a.max_steps:
                break
        epoch += 1
    if world > 1:
        dist.barrier()
    if start is not None:
        counting = time.perf_counter() - start
    tokens_per_s = counted * world / counting if counting > 0 else 0.0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if rank == 0:
        print("model=gpt world=%d steps=%d tokens_per_s=%.0f train_loss=%.4f val_loss=%.4f peak_rss_mib=%.0f "
              "precision=%s torch=%s compile=%s" % (world, step, tokens_per_s, train_loss, val_loss, rss,
                                                    a.precision, torch.__version__.split("+")[0], a.compile), flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
