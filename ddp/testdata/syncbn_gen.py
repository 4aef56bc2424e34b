# Writes syncbn_mnistnet_bn.json: the state-dict entries (name, shape,
# dtype) and print(model) of models.MNISTNetBN as a torch.nn.Sequential,
# before and after nn.SyncBatchNorm.convert_sync_batchnorm.
#
#   ~/.cache/gotrain/torch2-venv/bin/python ddp/testdata/syncbn_gen.py
import json
import os

import torch
from torch import nn


def mnist_net_bn():
    return nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 64, 3), nn.BatchNorm2d(64), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(9216, 128), nn.BatchNorm1d(128), nn.ReLU(),
        nn.Linear(128, 10),
    )


def entries(m):
    return [[k, list(v.shape), str(v.dtype).removeprefix("torch.")] for k, v in m.state_dict().items()]


plain = mnist_net_bn()
out = {"torch": torch.__version__, "state_dict": entries(plain), "repr": repr(plain)}
synced = nn.SyncBatchNorm.convert_sync_batchnorm(plain)
out["sync_state_dict"] = entries(synced)
out["sync_repr"] = repr(synced)
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "syncbn_mnistnet_bn.json")
with open(path, "w") as f:
    # One state-dict entry a line, so that a diff shows what changed.
    f.write("{\n")
    f.write(' "torch": %s,\n' % json.dumps(out["torch"]))
    for key in ("state_dict", "sync_state_dict"):
        f.write(' "%s": [\n%s\n ],\n' % (key, ",\n".join("  " + json.dumps(e) for e in out[key])))
    f.write(' "repr": %s,\n' % json.dumps(out["repr"]))
    f.write(' "sync_repr": %s\n' % json.dumps(out["sync_repr"]))
    f.write("}\n")
