#!/usr/bin/env python3
"""Writes the HF `tokenizers` reference that tokenizer_hf_test compares kiln's tokenizer with.

usage: make_hf_reference.py TESTDATA_DIR OUT_DIR

For each case, builds a tokenizer with HF `tokenizers` from the gpt-2 vocab GGUF in
TESTDATA_DIR/tokenizer-vectors (vocab + merges, read with `gguf`), saves it as
OUT_DIR/<case>.tokenizer.json (so the file is written by HF itself), and encodes a corpus of
>= 1 MB of varied text (the OpenAI OpenAPI spec, the chat templates, the vector strings and
random multi-script text under a fixed seed) in chunks, add_special_tokens=False:

  OUT_DIR/corpus.jsonl   one line per chunk: {"text": ..., "ids": {"<case>": [...], ...}}
"""
import json
import os
import random
import sys

import gguf
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
         r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


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
        tok.post_processor = processors.TemplateProcessing(
            single="<|endoftext|> $A", special_tokens=[("<|endoftext|>", vocab["<|endoftext|>"])])
    tok.add_special_tokens(["<|endoftext|>"])
    return tok


def corpus(testdata, rng):
    texts = []
    with open(os.path.join(testdata, "openai-openapi", "openapi.yaml"), encoding="utf-8") as f:
        texts.append(f.read()[:900_000])
    tdir = os.path.join(testdata, "chat-templates")
    for name in sorted(os.listdir(tdir)):
        with open(os.path.join(tdir, name), encoding="utf-8") as f:
            texts.append(f.read())
    vdir = os.path.join(testdata, "tokenizer-vectors")
    for name in sorted(os.listdir(vdir)):
        if name.endswith(".inp"):
            with open(os.path.join(vdir, name), encoding="utf-8") as f:
                texts.extend(f.read().split("\n__ggml_vocab_test__\n"))
    alphabet = ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                "     \t\n\r\n'\".,;:!?-_()[]{}<>/\\@#$%^&*+=~`|"
                "éèêëàâäçñößøåÉÀÇÑ" "αβγδεζηθΩπσ" "абвгдежзийклмнопрстуфхцчшщ"
                "中文字符测试日本語のテキスト한국어텍스트" "ابتثجحخدذرزسشصضطظعغ"
                "अआइईउऊ" "🙂😀🚀🎉👍🏽❤️" "\u00a0\u2000\u3000\u200b\u2028" "①②③١٢٣")
    for _ in range(3000):
        n = rng.randint(1, 120)
        texts.append("".join(rng.choice(alphabet) for _ in range(n)))
    # Chunks of random sizes, cut at character boundaries.
    chunks = []
    for t in texts:
        i = 0
        while i < len(t):
            n = rng.choice([1, 7, 60, 500, 4000])
            chunks.append(t[i:i + n])
            i += n
    return chunks


def main():
    testdata, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    vocab, merges = gpt2_parts(testdata)
    cases = ["gpt2", "llama3_regex", "qwen2_regex"]
    toks = {}
    for case in cases:
        toks[case] = build(case, vocab, merges)
        toks[case].save(os.path.join(out, case + ".tokenizer.json"))
    chunks = corpus(testdata, random.Random(1234))
    total = 0
    with open(os.path.join(out, "corpus.jsonl"), "w", encoding="utf-8") as f:
        for c in chunks:
            ids = {case: toks[case].encode(c, add_special_tokens=False).ids for case in cases}
            f.write(json.dumps({"text": c, "ids": ids}, ensure_ascii=False) + "\n")
            total += len(c.encode("utf-8"))
    print(f"{len(chunks)} chunks, {total} bytes, cases {cases}")


if __name__ == "__main__":
    main()
