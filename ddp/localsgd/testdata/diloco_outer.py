"""Writes diloco_outer.json: DiLoCo's outer step for two replicas, computed
with torch.optim.SGD(lr=0.7, momentum=0.9, nesterov=True) as the DiLoCo
paper and torchft use it.

Each round, every replica's parameters after its inner steps are given;
the outer gradient is the mean over replicas of (global - local); the
outer optimizer steps the global parameters with it.

Run: python diloco_outer.py  (torch 2.x, CPU)
"""
import json

import torch

torch.manual_seed(0)
shapes = [[2, 3], [2]]  # nn.Linear(3, 2): weight, bias
glob = [torch.randn(*s) for s in shapes]
init = torch.cat([g.flatten() for g in glob]).tolist()
params = [torch.nn.Parameter(g.clone()) for g in glob]
opt = torch.optim.SGD(params, lr=0.7, momentum=0.9, nesterov=True)
locals_, globals_ = [], []
for rnd in range(3):
    reps = []
    for rank in range(2):
        reps.append([p.detach() + 0.1 * torch.randn(p.shape) for p in params])
    locals_.append([torch.cat([t.flatten() for t in r]).tolist() for r in reps])
    for i, p in enumerate(params):
        p.grad = sum(p.detach() - reps[r][i] for r in range(2)) / 2
    opt.step()
    globals_.append(torch.cat([p.detach().flatten() for p in params]).tolist())
with open("diloco_outer.json", "w") as f:
    json.dump({"torch": torch.__version__, "shapes": shapes, "init": init,
               "locals": locals_, "globals": globals_}, f, indent=1)
