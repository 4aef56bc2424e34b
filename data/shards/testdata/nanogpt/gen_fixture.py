# Writes the fixture of TestPrepareMatchesNanoGPT: docs.jsonl, a few
# documents, and train.bin, their tokens as nanoGPT's
# data/openwebtext/prepare.py writes them (tiktoken's gpt2
# encode_ordinary, then the end-of-text token, concatenated as uint16).
# tiktoken's gpt2 is built from the ranks package tokenizer ships (the
# same as tiktoken downloads), offline.
#
#   ~/.cache/gotrain/torch2-venv/bin/python gen_fixture.py
import gzip
import json
import os

import numpy as np
import tiktoken

HERE = os.path.dirname(os.path.abspath(__file__))
PAT_GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def load_ranks(file):
    """The ranks of ../../../tokenizer/encodings/FILE.bpe.gz: varint-length-prefixed tokens, rank by rank."""
    raw = gzip.open(os.path.join(HERE, "..", "..", "..", "tokenizer", "encodings", file + ".bpe.gz")).read()
    ranks, i, rank = {}, 0, 0
    while i < len(raw):
        n, shift = 0, 0
        while True:
            b = raw[i]
            i += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        if n:
            ranks[raw[i:i + n]] = rank
        i += n
        rank += 1
    return ranks


docs = [
    "Hello, world! This is the first document.\n",
    "Second one: numbers 12345, symbols ~!@#$%^&*() and 'quotes'.\n\n  Indented line.",
    "Unicode: café, naïve, 日本語, emoji 🙂 and Ελληνικά.",
    "<|endoftext|> is plain text here, as encode_ordinary treats it.",
    "Short",
]
enc = tiktoken.Encoding(name="gpt2_local", pat_str=PAT_GPT2, mergeable_ranks=load_ranks("r50k_base"),
                        special_tokens={"<|endoftext|>": 50256})
os.chdir(HERE)
with open("docs.jsonl", "w", encoding="utf-8") as f:
    for d in docs:
        f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
ids = []
for d in docs:
    ids += enc.encode_ordinary(d) + [enc.eot_token]
np.array(ids, dtype=np.uint16).tofile("train.bin")
print(len(ids), "tokens")
