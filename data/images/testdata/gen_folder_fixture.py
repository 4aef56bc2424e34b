"""Writes the image tree folder/ and torchvision's view of it, folder.json.

Run with the venv's Python (torch 2.x, torchvision 0.29):
    ~/.cache/gotrain/torch2-venv/bin/python gen_folder_fixture.py

folder.json holds torchvision.datasets.ImageFolder's classes, class_to_idx
and samples (paths relative to folder/), and for each sample the values of
deterministic pipelines (see PIPELINES), flattened C×H×W.
"""
import json
import os

import numpy as np
import torch
from PIL import Image
from torchvision import datasets, transforms

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "folder")
rng = np.random.default_rng(7)


def save(rel, mode, w, h, **kw):
    path = os.path.join(ROOT, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if mode == "L":
        img = Image.fromarray(rng.integers(0, 256, (h, w), dtype=np.uint8), "L")
    elif mode == "RGBA":
        img = Image.fromarray(rng.integers(0, 256, (h, w, 4), dtype=np.uint8), "RGBA")
    elif mode == "P":
        img = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB").quantize(16)
    else:
        # Smooth content, so that JPEG's loss stays small.
        y, x = np.mgrid[0:h, 0:w]
        a = np.stack([x * 255 / max(w - 1, 1), y * 255 / max(h - 1, 1), (x + y) * 127 / max(w + h - 2, 1)], -1)
        img = Image.fromarray(a.astype(np.uint8), "RGB")
    img.save(path, **kw)


# Class folders out of order and of mixed case, a nested folder, every
# extension spelling, colour mode and JPEG chroma subsampling (4:2:0 is
# PIL's default) the Go decoder converts.
save("dog/b.png", "RGB", 9, 7)
save("dog/a.JPG", "RGB", 9, 7, quality=95)
save("dog/sub/c.png", "L", 9, 7)
save("Cat/x.png", "RGBA", 9, 7)
save("Cat/y.jpeg", "L", 9, 7, quality=95)
save("Cat/z.png", "P", 9, 7)
save("bird/n.png", "RGB", 9, 7)
save("bird/m.jpg", "RGB", 9, 7, quality=90, subsampling=1)  # 4:2:2
save("bird/o.jpeg", "RGB", 9, 7, quality=90, subsampling=0)  # 4:4:4
with open(os.path.join(ROOT, "bird", "notes.txt"), "w") as f:
    f.write("not an image: ImageFolder skips it\n")

MEAN, STD = [0.5, 0.4, 0.3], [0.2, 0.25, 0.3]
# The Go pipelines of the same names, minus randomness; Resize on the
# tensor (antialias=True, torchvision's default).
PIPELINES = {
    "tensor": transforms.Compose([transforms.ToTensor()]),
    "shrink": transforms.Compose([transforms.ToTensor(), transforms.Resize((4, 5), antialias=True)]),
    "grow_crop_norm": transforms.Compose([
        transforms.ToTensor(), transforms.Resize((11, 16), antialias=True),
        transforms.CenterCrop((8, 9)), transforms.Normalize(MEAN, STD)]),
    "pad_crop": transforms.Compose([transforms.ToTensor(), transforms.CenterCrop((10, 8))]),
}

ds = datasets.ImageFolder(ROOT)
out = {
    "classes": ds.classes,
    "class_to_idx": ds.class_to_idx,
    "samples": [[os.path.relpath(p, ROOT), c] for p, c in ds.samples],
    "pipelines": {},
}
for name, t in PIPELINES.items():
    vals = []
    for p, _ in ds.samples:
        x = t(Image.open(p).convert("RGB"))
        vals.append({"shape": list(x.shape), "values": [round(float(v), 7) for v in x.flatten()]})
    out["pipelines"][name] = vals
gray = transforms.ToTensor()
out["gray"] = [[round(float(v), 7) for v in gray(Image.open(p).convert("L")).flatten()] for p, _ in ds.samples]
with open(os.path.join(HERE, "folder.json"), "w") as f:
    json.dump(out, f)
print(out["classes"], len(out["samples"]), "samples")
