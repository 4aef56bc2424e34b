#!/usr/bin/python3
"""Where PyTorch 2.x's GPT training step goes: its step time and, with
torch.profiler, the share and rate of its GEMMs, for docs/bench/gemm_share.sh.

    OMP_NUM_THREADS=1 python jobs/gptjob/testdata/gemm_share_torch.py [--compile] \\
        [--n-layer 4 --n-head 4 --n-embd 128 --block-size 128 --batch-size 32] [--steps 10]

The step is train_gpt_torch.py's (nanoGPT's model, AdamW, cosine schedule,
clipping) on random windows of the job's corpus, cut before the timing. It
runs --warmup untimed steps (the compilation with --compile), --steps timed
ones, then --profile-steps under torch.profiler, and prints one line:

  runner=torch2 mode= layers= heads= embd= block= batch= step_s= tokens_per_s=
  prof_step_s= gemm_s= gemm_share= gemm_gflop= gemm_gflops= attn_s= attn_share=
  attn_gflop= gemm_attn_share= top_other=

gemm_* are the GEMM operators (aten::mm, addmm, bmm, baddbmm: the linear
layers and lm_head, forward and backward), their self CPU time per step, its
share of the profiled step and their FLOPs (2·m·n·k from the recorded
shapes) and rate. Attention runs fused (scaled_dot_product_attention's flash
kernel, its GEMMs inside the operator and not separable): attn_* are the
self CPU time of its forward and backward operators and the work attention
needs (six products over the causal half of the scores); gemm_attn_share
counts the two together as GEMM time. top_other names the three other
operators with the most self CPU time and their shares.
"""
import argparse
import os
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import nanogpt  # noqa: E402

GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")


def is_attention(name):
    return "scaled_dot_product" in name or "flash_attention" in name


def gemm_flops(name, shapes):
    """2·m·n·k of one call from its recorded input shapes."""
    if name == "aten::mm":
        (m, k), (_, n) = shapes[0], shapes[1]
        return 2 * m * n * k
    if name == "aten::addmm":
        (m, k), (_, n) = shapes[1], shapes[2]
        return 2 * m * n * k
    if name == "aten::bmm":
        (b, m, k), (_, _, n) = shapes[0], shapes[1]
        return 2 * b * m * n * k
    (b, m, k), (_, _, n) = shapes[1], shapes[2]  # baddbmm
    return 2 * b * m * n * k


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=128)
    ap.add_argument("--block-size", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    ap.add_argument("--steps", type=int, default=10, help="timed steps")
    ap.add_argument("--profile-steps", type=int, default=2, help="steps under torch.profiler")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--data", default=nanogpt.CORPUS)
    a = ap.parse_args()
    for name in ("n_layer", "n_head", "n_embd", "block_size", "batch_size", "steps", "profile_steps"):
        if getattr(a, name) < 1:
            sys.exit("gemm_share_torch: --%s must be at least 1" % name.replace("_", "-"))
    if a.n_embd % a.n_head:
        sys.exit("gemm_share_torch: --n-embd %d must be a multiple of --n-head %d" % (a.n_embd, a.n_head))
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    torch.manual_seed(1)
    model = nanogpt.GPT(256, a.block_size, a.n_layer, a.n_head, a.n_embd)
    fwd = torch.compile(model) if a.compile else model
    opt = nanogpt.optimizer(model)
    total = a.warmup + a.steps + a.profile_steps
    sched = nanogpt.schedule(opt, total, min(100, total), 1e-4)
    train, _ = nanogpt.split(nanogpt.corpus_tokens(a.data))
    T, B = a.block_size, a.batch_size
    starts = torch.randint(0, len(train) - T - 1, (total, B))
    batches = [(torch.stack([train[s:s + T] for s in row]), torch.stack([train[s + 1:s + T + 1] for s in row]))
               for row in starts.tolist()]

    def step(i):
        x, y = batches[i]
        opt.zero_grad(set_to_none=True)
        _, loss = fwd(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        return loss.item()

    for i in range(a.warmup):
        step(i)
    t0 = time.perf_counter()
    for i in range(a.warmup, a.warmup + a.steps):
        step(i)
    step_s = (time.perf_counter() - t0) / a.steps

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        t0 = time.perf_counter()
        for i in range(a.warmup + a.steps, total):
            step(i)
        prof_s = (time.perf_counter() - t0) / a.profile_steps

    gemm_us, flops, attn_us, other = 0.0, 0, 0.0, {}
    for e in prof.key_averages(group_by_input_shape=True):
        if e.key in GEMM_OPS:
            gemm_us += e.self_cpu_time_total
            flops += e.count * gemm_flops(e.key, e.input_shapes)
        elif is_attention(e.key):
            attn_us += e.self_cpu_time_total
        else:
            other[e.key] = other.get(e.key, 0.0) + e.self_cpu_time_total
    n = a.profile_steps
    gemm_s, attn_s = gemm_us / 1e6 / n, attn_us / 1e6 / n
    gemm_gflop = flops / 1e9 / n
    dh = a.n_embd // a.n_head
    attn_gflop = 6 * B * a.n_head * a.n_layer * 2 * T * T * dh / 2 / 1e9
    top = sorted(other.items(), key=lambda kv: -kv[1])[:3]
    # Names without spaces (compiled graphs' records have some), so the
    # line stays KEY=VALUE fields.
    top_other = ",".join("%s:%.3f" % ("_".join(k.split()), v / 1e6 / n / prof_s) for k, v in top)
    print("runner=torch2 mode=%s layers=%d heads=%d embd=%d block=%d batch=%d step_s=%.5f tokens_per_s=%.0f "
          "prof_step_s=%.5f gemm_s=%.5f gemm_share=%.3f gemm_gflop=%.3f gemm_gflops=%.1f attn_s=%.5f attn_share=%.3f "
          "attn_gflop=%.3f gemm_attn_share=%.3f torch=%s top_other=%s"
          % ("compile" if a.compile else "eager", a.n_layer, a.n_head, a.n_embd, T, B, step_s, B * T / step_s,
             prof_s, gemm_s, gemm_s / prof_s, gemm_gflop, gemm_gflop / gemm_s if gemm_s > 0 else 0.0,
             attn_s, attn_s / prof_s, attn_gflop, (gemm_s + attn_s) / prof_s, torch.__version__.split("+")[0],
             top_other), flush=True)


if __name__ == "__main__":
    main()
