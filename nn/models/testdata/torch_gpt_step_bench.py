#!/usr/bin/python3
"""Times the model part of one training step of the default GPT in PyTorch
(zero grads, forward, cross-entropy, backward), the side-by-side figure for
BenchmarkGPTStep: 4 layers, 4 heads, width 128, block 128, vocabulary 256,
batch 32, with the nanoGPT-equivalent model of gen_gpt_fixture.py.

usage: /usr/bin/python3 nn/models/testdata/torch_gpt_step_bench.py [threads] [steps] [fp32|bf16]
(default 1 thread, as GOTRAIN_NUM_THREADS=1 for the Go benchmark; bf16 runs
the forward, and so its backward, under torch.autocast("cpu",
dtype=torch.bfloat16), the side-by-side figure for BenchmarkGPTStepBF16)
"""
import os, sys, time
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "checkpoint", "testdata"))
import gen_gpt_fixture as g  # noqa: E402


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    precision = sys.argv[3] if len(sys.argv) > 3 else "fp32"
    if precision not in ("fp32", "bf16"):
        sys.exit("precision %r: want fp32 or bf16" % precision)
    torch.set_num_threads(threads)
    g.VOCAB, g.BLOCK, g.NLAYER, g.NHEAD, g.NEMBD = 256, 128, 4, 4, 128
    torch.manual_seed(1)
    model = g.GPT()
    B, T = 32, 128
    idx = torch.randint(0, g.VOCAB, (B, T))
    targets = torch.randint(0, g.VOCAB, (B, T))

    def step():
        model.zero_grad(set_to_none=False)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            _, loss = model(idx, targets)
        loss.backward()

    for _ in range(2):  # warm-up
        step()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        step()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print("torch_gpt_step precision=%s threads=%d s_per_step=%.4f tokens_per_s=%.0f tokens_per_cpu_s=%.0f"
          % (precision, threads, wall / steps, B * T * steps / wall, B * T * steps / cpu))


if __name__ == "__main__":
    main()
