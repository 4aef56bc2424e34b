"""Minimal safetensors reader/writer with struct and json, for the interop
scripts (Debian's PyTorch 1.13 ships without the safetensors package). It
lays files out like the reference library: tensors sorted by descending
dtype then name, "__metadata__" first, header padded with spaces to 8 bytes.
"""
import json
import struct

import torch

# Rank in the reference library's Dtype enum (the writer sorts by it).
_ORDER = {"F16": 7, "BF16": 8, "I32": 9, "F32": 11, "F64": 12, "I64": 13}
_TO_TORCH = {"F16": torch.float16, "BF16": torch.bfloat16, "I32": torch.int32,
             "F32": torch.float32, "F64": torch.float64, "I64": torch.int64}
_FROM_TORCH = {v: k for k, v in _TO_TORCH.items()}


def save_file(tensors, path, metadata=None):
    items = sorted(tensors.items(), key=lambda kv: (-_ORDER[_FROM_TORCH[kv[1].dtype]], kv[0]))
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, t in items:
        raw = t.detach().contiguous().cpu().numpy().tobytes()  # little-endian on x86
        header[name] = {"dtype": _FROM_TORCH[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def load_file(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    base = 8 + n
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        buf = bytearray(data[base + b:base + e])
        t = torch.frombuffer(buf, dtype=_TO_TORCH[info["dtype"]]) if buf else torch.empty(0, dtype=_TO_TORCH[info["dtype"]])
        out[name] = t.reshape(info["shape"]).clone()
    return out
