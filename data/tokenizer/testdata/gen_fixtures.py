"""Generates the exactness fixtures of package tokenizer.

Run from this directory with the venv's Python (tiktoken 0.14, tokenizers
0.23):

    ~/.cache/gotrain/torch2-venv/bin/python gen_fixtures.py

tiktoken: Encoding objects are built from the rank data the package ships
(../encodings/*.bpe.gz) with tiktoken's official patterns and special
tokens, so no download is needed.
Hugging Face: a small byte-level BPE is trained on train_corpus.txt and
saved as hf_bpe/tokenizer.json and as GPT-2 style hf_bpe/vocab.json +
merges.txt; two variants use a Split pre-tokenizer with cl100k's and
o200k's patterns. If go_trained/tokenizer.json exists (written by
`go test -run TestTrainFixture -update`), it is loaded with
tokenizers.Tokenizer.from_file and its encodings recorded too.

Python strings cannot hold invalid UTF-8, so the fixtures have none; the Go
tests check invalid UTF-8 by round trip.
"""

import gzip
import json
import os
import random

import tiktoken
import tokenizers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

HERE = os.path.dirname(os.path.abspath(__file__))

PAT_GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
PAT_CL100K = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
PAT_O200K = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])

ENCODINGS = {
    "gpt2": ("r50k_base", PAT_GPT2, {"<|endoftext|>": 50256}),
    "cl100k_base": ("cl100k_base", PAT_CL100K, {
        "<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
        "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276}),
    "o200k_base": ("o200k_base", PAT_O200K, {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}),
}

TEXTS = [
    "", "a", "hello world", "Hello World!", "  ", " ", "\n", "\t",
    "It's, they're, we've, I'm, you'll, he'd, don't",
    "IT'S THEY'RE WE'VE I'M YOU'LL HE'D DON'T", "It'S 'Sam 'LL 're'", "'s's's '", "x'ſ 'ſ",
    "   leading spaces", "trailing spaces   ", "mixed \t \n \r\n  \n\n\t end",
    "a\n\nb\r\n\r\nc \n d\t\n", "\n\n\n", " \n ", "tabs\t\tand\tmore\t",
    "1 12 123 1234 12345 123456 1234567", "3.14159 2026-12-04 1,000,000 -42 +7",
    "٣٤٥ ١٢ ⅷ ½ ²³", "日本語のテキスト", "中文文本，以及标点。", "한국어 문장도 있습니다.",
    "Emoji 👍 👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️ 🙂🙃", "e\u0301 cafe\u0301 n\u0303 a\u0308b\u0327c", "\u0301start with a mark",
    "ÀÉÎÕÜ àéîõü ÆæØøÅå ßẞ", "ΑΒΓ αβγ Ωμέγα", "Кириллица и кириллица", "עברית ועוד", "العربية",
    "CamelCaseWordsAndHTTPServer URLs", "snake_case_words and kebab-case", "path/to/file.go //comment\n/* c */",
    "func main() {\n\tfmt.Println(\"hi\")\n}\n", "<|endoftext|>", "a<|endoftext|>b", "x <|endoftext|> y<|fim_prefix|>z",
    "<|endofprompt|><|endoftext|><|endoftext|>", "<|endoftext", "!!!???...,,,", " !!! ??? ...\n\n",
    "mixed😀text😀😀 and 中文English", "\u00a0nbsp\u00a0 \u2003em\u3000ideo", "\u200bzero\u200dwidth",
    "ǅemal ǈj ǋ Titlecase", "ʰʲ modifier ˈletters", "x" * 300, "ab" * 200, " " * 70 + "x",
    "0123456789" * 12,
]

# Characters the random texts are drawn from: every class the patterns
# distinguish.
ALPHABET = list("aZ'sStTrReEvVmMlLdD ,.!?-/\\\"\t\n\r09") + [
    "é", "Ö", "ß", "ǅ", "ʰ", "\u0301", "\u0308", "日", "本", "한", "٣", "½", "Ⅷ", "👍", "🏽",
    "\u200d", "\u00a0", "\u3000", "€", "ſ", "<|endoftext|>", "  ", "\r\n", "'re", "'LL", "123",
]


def random_texts(n, seed):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(1, 24)
        out.append("".join(rng.choice(ALPHABET) for _ in range(k)))
    return out


def load_ranks(file):
    raw = gzip.open(os.path.join(HERE, "..", "encodings", file + ".bpe.gz")).read()
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


def tiktoken_fixtures(texts):
    out = {}
    for name, (file, pat, specials) in ENCODINGS.items():
        enc = tiktoken.Encoding(name=name + "_local", pat_str=pat, mergeable_ranks=load_ranks(file),
                                special_tokens=specials)
        cases = []
        for t in texts:
            case = {"text": t, "ids": enc.encode_ordinary(t)}
            if any(s in t for s in specials):
                case["special_ids"] = enc.encode(t, allowed_special="all")
            cases.append(case)
        out[name] = cases
    return out


def train_hf():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=500, min_frequency=2, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train([os.path.join(HERE, "train_corpus.txt")], trainer)
    os.makedirs(os.path.join(HERE, "hf_bpe"), exist_ok=True)
    tok.save(os.path.join(HERE, "hf_bpe", "tokenizer.json"))
    tok.model.save(os.path.join(HERE, "hf_bpe"))
    spec = json.loads(tok.to_str())
    for name, pat in (("cl100k", PAT_CL100K), ("o200k", PAT_O200K)):
        spec["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pat}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
        with open(os.path.join(HERE, "hf_split_%s.json" % name), "w") as f:
            json.dump(spec, f, ensure_ascii=False)
    spec["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    with open(os.path.join(HERE, "hf_prefix_space.json"), "w") as f:
        json.dump(spec, f, ensure_ascii=False)


def hf_cases(tok, texts):
    cases = []
    for t in texts:
        case = {"text": t, "special_ids": tok.encode(t, add_special_tokens=False).ids}
        cases.append(case)
    return cases


def main():
    texts = TEXTS + random_texts(150, 1)
    fixtures = tiktoken_fixtures(texts)
    with open(os.path.join(HERE, "tiktoken_fixtures.json"), "w") as f:
        json.dump({"tiktoken": tiktoken.__version__, "cases": fixtures}, f, ensure_ascii=False, separators=(",", ":"))

    train_hf()
    hf = {}
    for rel in ("hf_bpe/tokenizer.json", "hf_split_cl100k.json", "hf_split_o200k.json", "hf_prefix_space.json"):
        hf[rel] = hf_cases(Tokenizer.from_file(os.path.join(HERE, rel)), texts)
    go_trained = os.path.join(HERE, "go_trained", "tokenizer.json")
    if os.path.exists(go_trained):
        hf["go_trained/tokenizer.json"] = hf_cases(Tokenizer.from_file(go_trained), texts)
    with open(os.path.join(HERE, "hf_fixtures.json"), "w") as f:
        json.dump({"tokenizers": tokenizers.__version__, "cases": hf}, f, ensure_ascii=False, separators=(",", ":"))


if __name__ == "__main__":
    main()
