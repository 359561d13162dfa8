#!/usr/bin/env python3
"""Checks `kiln chat-template` and `kiln tokenize` against HF transformers, byte for byte.

For `kiln synth --no-weights` checkpoints of a few presets, compares
AutoTokenizer.from_pretrained(dir).apply_chat_template(messages, tools=..., add_generation_prompt=True)
(tokenize=False: the text; tokenize=True: the ids) with `kiln chat-template` (with and without
--tokenize), and tok.encode(text, add_special_tokens=True) with
`kiln tokenize --add-special --parse-special`.

Usage: check_chat_template_cli.py --kiln PATH/TO/kiln --work-dir DIR
Exit 0 on success, 1 on a failed check, 77 (skipped) when transformers or jinja2 is missing.
"""
import argparse
import json
import os
import subprocess
import sys

PRESETS = ["llama-3.1-8b", "qwen2-7b", "smollm2-135m"]
CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is 2+2? Answer with café ☕ and 日本語."},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "And 3+3?"},
    ],
]
TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]},
    },
}]
TEXTS = [
    "Hello, world!",
    "<|im_start|>user\nhi<|im_end|>",
    "  spaces\tand\nnew lines ümlaut 🎉",
]


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def run(cmd):
    p = subprocess.run(cmd, capture_output=True)
    if p.returncode != 0:
        fail(f"{' '.join(cmd)} -> exit {p.returncode}: {p.stderr.decode(errors='replace')}")
    return p.stdout


def ids_of(out):
    return [int(x) for x in out.decode().split()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work-dir", required=True)
    args = ap.parse_args()
    try:
        import jinja2  # noqa: F401
        import transformers
    except ImportError as e:
        print(f"skipped: {e}")
        return 77
    os.makedirs(args.work_dir, exist_ok=True)
    checks = 0
    for preset in PRESETS:
        d = os.path.join(args.work_dir, preset)
        run([args.kiln, "synth", "--preset", preset, "--no-weights", "--force", "--out", d])
        tok = transformers.AutoTokenizer.from_pretrained(d)
        tools_file = os.path.join(args.work_dir, "tools.json")
        with open(tools_file, "w") as f:
            json.dump(TOOLS, f)
        for i, conv in enumerate(CONVERSATIONS):
            msg_file = os.path.join(args.work_dir, f"messages{i}.json")
            with open(msg_file, "w") as f:
                json.dump(conv, f, ensure_ascii=False)
            for tools in (None, TOOLS):
                extra = ["--tools", tools_file] if tools else []
                base = [args.kiln, "chat-template", d, "--messages", msg_file,
                        "--add-generation-prompt"] + extra
                want = tok.apply_chat_template(conv, tools=tools, add_generation_prompt=True,
                                               tokenize=False)
                got = run(base).decode()
                if got != want:
                    fail(f"{preset} conversation {i} tools={bool(tools)}:\n"
                         f"HF:   {want!r}\nkiln: {got!r}")
                want_ids = tok.apply_chat_template(conv, tools=tools, add_generation_prompt=True,
                                                   tokenize=True)
                if isinstance(want_ids, dict) or hasattr(want_ids, "keys"):
                    want_ids = want_ids["input_ids"]
                got_ids = ids_of(run(base + ["--tokenize"]))
                if got_ids != list(want_ids):
                    fail(f"{preset} conversation {i} tools={bool(tools)} ids:\n"
                         f"HF:   {list(want_ids)}\nkiln: {got_ids}")
                checks += 2
        for text in TEXTS:
            want = tok.encode(text, add_special_tokens=True)
            got = ids_of(run([args.kiln, "tokenize", d, "--text", text, "--add-special",
                              "--parse-special"]))
            if got != want:
                fail(f"{preset} encode {text!r}:\nHF:   {want}\nkiln: {got}")
            checks += 1
    print(f"{checks} checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
