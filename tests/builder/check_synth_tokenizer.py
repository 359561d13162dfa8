#!/usr/bin/env python3
"""Checks the synthetic tokenizers that `kiln synth` writes, with HF `tokenizers` (a reference
nobody here wrote).

For every preset it writes the config and tokenizer files (`kiln synth --no-weights`) and checks
that tokenizer.json loads with tokenizers.Tokenizer.from_file, has exactly vocab_size ids (model
vocab + added tokens), round-trips ASCII, CJK and emoji text, puts the bos / eos ids of config.json
on special tokens, prepends bos when tokenizer_config.json says so, and (when jinja2 is installed)
that the chat template renders to text that encodes its turn markers as single special tokens.
When `transformers` is installed it also loads the directory with AutoTokenizer.from_pretrained
and checks that it has vocab_size ids and encodes every text exactly as `tokenizers` does.

Usage: check_synth_tokenizer.py --kiln PATH/TO/kiln --work-dir DIR
Exit 0 on success, 1 on a failed check, 77 (skipped) when `tokenizers` is not installed.
"""
import argparse
import json
import os
import subprocess
import sys

PRESETS = ["llama-3.1-8b", "llama-3.1-70b", "mistral-7b", "qwen2-7b", "smollm2-135m"]
TEXTS = [
    "Hello, world! The quick brown fox jumps over the lazy dog.",
    "  leading spaces, tabs\tand\nnew lines\r\n",
    "日本語のテキストと中文文本",
    "emoji: 🎉🚀👩‍💻 and accents: café naïve Ωmega",
    "code: for (int i = 0; i < n; ++i) { x[i] = y[i] * 2; }",
    "",
]


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def check_preset(tokenizers, kiln, work_dir, preset, jinja2, auto_tokenizer):
    out = os.path.join(work_dir, preset)
    subprocess.run([kiln, "synth", "--preset", preset, "--no-weights", "--force", "--out", out],
                   check=True, stdout=subprocess.DEVNULL)
    config = json.load(open(os.path.join(out, "config.json")))
    tok_config = json.load(open(os.path.join(out, "tokenizer_config.json")))
    tok = tokenizers.Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    vocab_size = config["vocab_size"]

    got = tok.get_vocab_size(with_added_tokens=True)
    if got != vocab_size:
        fail(f"{preset}: {got} ids, config says {vocab_size}")
    ids = sorted(tok.get_vocab(with_added_tokens=True).values())
    if ids != list(range(vocab_size)):
        fail(f"{preset}: ids are not exactly 0..{vocab_size - 1}")

    for text in TEXTS:
        enc = tok.encode(text, add_special_tokens=False)
        if any(i >= vocab_size for i in enc.ids):
            fail(f"{preset}: id out of range encoding {text!r}")
        back = tok.decode(enc.ids, skip_special_tokens=False)
        if back != text:
            fail(f"{preset}: round trip {text!r} -> {enc.tokens} -> {back!r}")

    eos = config["eos_token_id"]
    eos = eos if isinstance(eos, list) else [eos]
    specials = {t.content for t in tok.get_added_tokens_decoder().values() if t.special}
    bos = config.get("bos_token_id")
    for role, i in [("bos", bos)] + [("eos", e) for e in eos]:
        if i is None:
            continue
        content = tok.id_to_token(i)
        if content not in specials:
            fail(f"{preset}: {role} id {i} is {content!r}, not a special token")
        if tok.token_to_id(content) != i:
            fail(f"{preset}: {content!r} maps to {tok.token_to_id(content)}, expected {i}")
        # Written literally in text, a special token encodes to its own id.
        if tok.encode("a" + content + "b", add_special_tokens=False).ids[1] != i:
            fail(f"{preset}: {content!r} in text does not encode to id {i}")
    for key in ("bos_token", "eos_token"):
        if tok_config[key] is not None and tok_config[key] not in specials:
            fail(f"{preset}: tokenizer_config {key} {tok_config[key]!r} is not a special token")
    if tok_config["eos_token"] is not None and tok.token_to_id(tok_config["eos_token"]) not in eos:
        fail(f"{preset}: tokenizer_config eos_token is not one of config.json's eos ids")

    with_bos = tok.encode("hi").ids
    if tok_config["add_bos_token"]:
        if with_bos[0] != bos:
            fail(f"{preset}: add_bos_token but encode('hi') = {with_bos}")
    elif bos is not None and with_bos[0] == bos:
        fail(f"{preset}: bos prepended although add_bos_token is false")

    if jinja2 is not None:
        env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        template = env.from_string(tok_config["chat_template"])
        messages = [{"role": "user", "content": "Hi 你好"}, {"role": "assistant", "content": "Yo"}]
        text = template.render(messages=messages, add_generation_prompt=True,
                               bos_token=tok_config["bos_token"] or "",
                               eos_token=tok_config["eos_token"] or "")
        enc = tok.encode(text, add_special_tokens=False)
        turn_end = "<|eot_id|>" if "<|eot_id|>" in specials else "<|im_end|>"
        if enc.ids.count(tok.token_to_id(turn_end)) != 2:
            fail(f"{preset}: chat template {text!r} encodes to {enc.tokens}")
        if tok.decode(enc.ids, skip_special_tokens=False) != text:
            fail(f"{preset}: chat text does not round-trip")
    if auto_tokenizer is not None:
        hf = auto_tokenizer.from_pretrained(out)
        if len(hf) != vocab_size:
            fail(f"{preset}: AutoTokenizer has {len(hf)} ids")
        for text in TEXTS:
            if hf(text, add_special_tokens=False)["input_ids"] != tok.encode(
                    text, add_special_tokens=False).ids:
                fail(f"{preset}: AutoTokenizer encodes {text!r} differently")
        if hf("hi")["input_ids"] != with_bos:
            fail(f"{preset}: AutoTokenizer adds special tokens differently")
    print(f"ok {preset}: {vocab_size} ids, {len(specials)} special tokens"
          + (", AutoTokenizer agrees" if auto_tokenizer is not None else ""))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kiln", required=True)
    parser.add_argument("--work-dir", required=True)
    args = parser.parse_args()
    try:
        import tokenizers
    except ImportError:
        print("SKIP: the Python package `tokenizers` is not installed")
        sys.exit(77)
    try:
        import jinja2
        import jinja2.sandbox
    except ImportError:
        jinja2 = None
        print("note: jinja2 not installed; chat templates not rendered")
    try:
        from transformers import AutoTokenizer
    except ImportError:
        AutoTokenizer = None
        print("note: transformers not installed; AutoTokenizer not checked")
    os.makedirs(args.work_dir, exist_ok=True)
    for preset in PRESETS:
        check_preset(tokenizers, args.kiln, args.work_dir, preset, jinja2, AutoTokenizer)


if __name__ == "__main__":
    main()
