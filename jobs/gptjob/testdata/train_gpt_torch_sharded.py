#!/usr/bin/python3
"""`gotrain train gpt --sharding S` in PyTorch 2.x: the GPT job of
train_gpt_torch.py (the same nanoGPT model, data, AdamW groups, warm-up and
cosine schedule, clipping, evaluation) trained data-parallel with the
training state sharded over the ranks as PyTorch shards it, for the
side-by-side benchmark docs/bench/sharding_vs_torch2.sh.

    OMP_NUM_THREADS=1 python jobs/gptjob/testdata/train_gpt_torch_sharded.py --world 4 --sharding full
    # or under torchrun (leave --world out)
    OMP_NUM_THREADS=1 torchrun --nproc-per-node 4 jobs/gptjob/testdata/train_gpt_torch_sharded.py --sharding zero1

--sharding:
  ddp (or none)  DistributedDataParallel, every rank holds all the state.
  zero1          DDP and torch.distributed.optim.ZeroRedundancyOptimizer
                 (AdamW, the job's two parameter groups): the optimizer state
                 sharded, gradients all-reduced whole.
  zero2          FSDP2 fully_shard(reshard_after_forward=False) on every
                 transformer block and the root: parameters, gradients and
                 optimizer state sharded; a block's gathered parameters are
                 kept from its forward to its backward.
  full           FSDP2 fully_shard on every transformer block and the root:
                 a block's parameters are gathered only while it runs.
--activation-checkpointing recomputes each transformer block's forward pass
in its backward, as gotrain's --activation-checkpointing: the block's forward
runs under torch.utils.checkpoint.checkpoint(use_reentrant=False). The
block's own forward method is the one replaced, so the hooks DDP and
fully_shard put on the block (its parameters' gather, gradients' reduction)
run outside the recomputed region, as with checkpoint_wrapper wrapped inside
fully_shard (torchtitan's order). Parameter names do not change. It runs
with every strategy and both FSDP APIs on CPU with gloo (PyTorch 2.15).
--fsdp-api 1 runs zero2 and full on the FSDP1 wrapper instead
(ShardingStrategy.SHARD_GRAD_OP and FULL_SHARD, one unit per transformer
block by transformer_auto_wrap_policy, use_orig_params=True so that the
parameter groups stay per parameter). With PyTorch 2.15 (CPU build) both APIs
run on CPU with gloo; FSDP2 is the default as the one PyTorch recommends and
the one whose per-parameter layout gotrain's ddp/fsdp follows.

Every rank builds the whole model from the seed and then shards it, as
gotrain does, so the start-up peak holds one whole fp32 model on every rank.
Clipping is the global norm over all ranks' shards: torch.nn.utils.
clip_grad_norm_ on FSDP2's DTensor gradients, FSDP1's clip_grad_norm_.

The last line on stdout (rank 0) is the summary in gotrain's keys:
`model=gpt world= steps= tokens_per_s= train_loss= val_loss=
peak_rss_mib_ranks=a/b/c/d peak_rss_mib= start_rss_mib= sharding= fsdp_api=
activation_checkpointing= torch=`, where
tokens_per_s counts all ranks' tokens over the steps after the first 5
(a shorter run: after the first step), evaluation excluded, and
peak_rss_mib_ranks is each rank's peak RSS (getrusage ru_maxrss), rank
order, peak_rss_mib their largest, and start_rss_mib the largest rank's
resident set before the model is built (PyTorch's libraries and the
process group; the first step maps more of PyTorch's code, about 190 MiB
at a tiny size on 2.15).
"""
import argparse
import functools
import os
import resource
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import nanogpt  # noqa: E402
from train_gpt_torch import WARMUP_STEPS_UNTIMED, Windows  # noqa: E402

STRATEGIES = ("ddp", "none", "zero1", "zero2", "full")


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
    ap.add_argument("--world", type=int, default=1, help="start this many workers on this machine")
    ap.add_argument("--sharding", choices=STRATEGIES, default="full")
    ap.add_argument("--fsdp-api", type=int, choices=(1, 2), default=2,
                    help="zero2 and full: FSDP2 fully_shard (2) or the FSDP1 wrapper (1)")
    ap.add_argument("--activation-checkpointing", action="store_true",
                    help="recompute each transformer block's forward pass in backward instead of keeping its activations")
    a = ap.parse_args()
    if a.sharding == "none":
        a.sharding = "ddp"
    for name in ("n_layer", "n_head", "n_embd", "block_size", "batch_size", "max_steps", "eval_every", "eval_batches"):
        if getattr(a, name) < 1:
            ap.error("--%s must be at least 1, not %d" % (name.replace("_", "-"), getattr(a, name)))
    if a.n_embd % a.n_head:
        ap.error("--n-embd %d is not a multiple of --n-head %d" % (a.n_embd, a.n_head))
    if not os.path.isfile(a.data):
        ap.error("--data %s: no such file" % a.data)
    if "RANK" in os.environ:
        train(a)
        return
    if a.world < 2:
        ap.error("--world %d: sharding needs at least 2 workers (or run under torchrun)" % a.world)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(worker, args=(a, port), nprocs=a.world, start_method="spawn")


def worker(rank, a, port):
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(a.world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    train(a)


def param_groups(named, weight_decay):
    """The job's AdamW groups: decay on parameters of two or more dimensions.
    named maps a parameter's name to (parameter, its dimensions in the whole
    model), so that sharded parameters are grouped as the whole ones are."""
    named = list(named)
    decay = [p for p, dims in named if dims >= 2]
    no_decay = [p for p, dims in named if dims < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def checkpoint_blocks(model):
    """Makes each transformer block recompute its forward pass in backward:
    the block's forward method (not its __call__, where DDP's and
    fully_shard's hooks run) becomes torch.utils.checkpoint.checkpoint of
    the original, non-reentrant, which keeps only the block's input."""
    from torch.utils.checkpoint import checkpoint
    for block in model.transformer.h:
        block.forward = functools.partial(checkpoint, block.forward, use_reentrant=False)


def wrap(a, model, world):
    """The model wrapped for a.sharding, its optimizer, and a function that
    clips the global gradient norm."""
    betas = (0.9, 0.95)
    dims = {n: p.dim() for n, p in model.named_parameters()}
    if a.activation_checkpointing:
        checkpoint_blocks(model)
    if a.sharding == "ddp":
        fwd = DDP(model)
        opt = torch.optim.AdamW(param_groups(((p, dims[n]) for n, p in model.named_parameters()), a.weight_decay),
                                lr=a.lr, betas=betas)
        return fwd, opt, lambda m: torch.nn.utils.clip_grad_norm_(model.parameters(), m)
    if a.sharding == "zero1":
        from torch.distributed.optim import ZeroRedundancyOptimizer
        fwd = DDP(model)
        opt = ZeroRedundancyOptimizer(param_groups(((p, dims[n]) for n, p in model.named_parameters()), a.weight_decay),
                                      optimizer_class=torch.optim.AdamW, lr=a.lr, betas=betas)
        return fwd, opt, lambda m: torch.nn.utils.clip_grad_norm_(model.parameters(), m)
    if a.fsdp_api == 2:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh("cpu", (world,))
        keep = a.sharding == "zero2"
        for block in model.transformer.h:
            fully_shard(block, mesh=mesh, reshard_after_forward=not keep)
        fully_shard(model, mesh=mesh, reshard_after_forward=not keep)
        # The parameters are now DTensors of the whole shapes: dim() is the
        # whole parameter's.
        opt = torch.optim.AdamW(param_groups(((p, dims[n]) for n, p in model.named_parameters()), a.weight_decay),
                                lr=a.lr, betas=betas)
        return model, opt, lambda m: torch.nn.utils.clip_grad_norm_(model.parameters(), m)
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
    policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={nanogpt.Block})
    strategy = ShardingStrategy.SHARD_GRAD_OP if a.sharding == "zero2" else ShardingStrategy.FULL_SHARD
    fwd = FSDP(model, sharding_strategy=strategy, auto_wrap_policy=policy, use_orig_params=True,
               device_id=torch.device("cpu"))
    # FSDP1 names carry its wrappers' prefix, and its parameters outside
    # forward are flat shards: group by the names and shapes from before.
    prefix = "_fsdp_wrapped_module."
    named = ((p, dims[n.replace(prefix, "")]) for n, p in fwd.named_parameters())
    opt = torch.optim.AdamW(param_groups(named, a.weight_decay), lr=a.lr, betas=betas)
    return fwd, opt, lambda m: fwd.clip_grad_norm_(m)


def rss_mib():
    """This process's resident set now, in MiB (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)


def train(a):
    min_lr = a.lr / 10 if a.min_lr is None else a.min_lr
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    dist.init_process_group("gloo")
    start_rss = rss_mib()
    torch.manual_seed(a.seed)
    model = nanogpt.GPT(256, a.block_size, a.n_layer, a.n_head, a.n_embd)
    fwd, opt, clip = wrap(a, model, world)
    sharded = a.sharding in ("zero2", "full")

    train_tokens, val = nanogpt.split(nanogpt.corpus_tokens(a.data))
    ds = Windows(train_tokens, a.block_size)
    sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True, seed=a.seed)
    loader = DataLoader(ds, batch_size=a.batch_size, sampler=sampler, drop_last=True)
    sched = nanogpt.schedule(opt, a.max_steps, a.warmup_steps, min_lr)
    # gotrain's meter: from step 5 on; a shorter run from step 1 on.
    first_timed = WARMUP_STEPS_UNTIMED if a.max_steps > WARMUP_STEPS_UNTIMED else 1

    step, counted, counting, start = 0, 0, 0.0, None
    loss_sum, loss_steps, train_loss, val_loss = 0.0, 0, 0.0, 0.0
    epoch = 0
    while step < a.max_steps:
        sampler.set_epoch(epoch)
        for x, y in loader:
            if step == first_timed and a.max_steps > 1:
                dist.barrier()
                start, counted = time.perf_counter(), 0
            opt.zero_grad(set_to_none=True)
            _, loss = fwd(x, y)
            loss.backward()
            if a.grad_clip > 0:
                clip(a.grad_clip)
            opt.step()
            sched.step()
            step += 1
            counted += x.numel()
            loss_sum += loss.item()
            loss_steps += 1
            if step % a.eval_every == 0 or step == a.max_steps:
                paused = time.perf_counter()
                mean = torch.tensor([loss_sum / loss_steps], dtype=torch.float64)
                dist.all_reduce(mean)
                train_loss, loss_sum, loss_steps = mean.item() / world, 0.0, 0
                # A sharded model runs forward on every rank together.
                if sharded:
                    val_loss = nanogpt.val_loss(fwd, val, a.block_size, a.batch_size, a.eval_batches)
                elif rank == 0:
                    val_loss = nanogpt.val_loss(model, val, a.block_size, a.batch_size, a.eval_batches)
                if rank == 0:
                    print("step %d: train_loss=%.4f val_loss=%.4f lr=%.3g" % (step, train_loss, val_loss,
                          opt.param_groups[0]["lr"]), file=sys.stderr, flush=True)
                if start is not None:
                    start += time.perf_counter() - paused
            if step == a.max_steps:
                break
        epoch += 1
    dist.barrier()
    if start is not None:
        counting = time.perf_counter() - start
    tokens_per_s = counted * world / counting if counting > 0 else 0.0
    mine = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, start_rss], dtype=torch.float64)
    gathered = [torch.zeros(2, dtype=torch.float64) for _ in range(world)]
    dist.all_gather(gathered, mine)
    rss = [round(g[0].item()) for g in gathered]
    if rank == 0:
        api = a.fsdp_api if sharded else "-"
        print("model=gpt world=%d steps=%d tokens_per_s=%.0f train_loss=%.4f val_loss=%.4f peak_rss_mib_ranks=%s "
              "peak_rss_mib=%d start_rss_mib=%d sharding=%s fsdp_api=%s activation_checkpointing=%s torch=%s" % (
                  world, step, tokens_per_s, train_loss, val_loss, "/".join(str(r) for r in rss), max(rss),
                  round(max(g[1].item() for g in gathered)), a.sharding, api,
                  "on" if a.activation_checkpointing else "off", torch.__version__.split("+")[0]),
              flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
