#!/usr/bin/env python3
"""Loads a `kiln synth` checkpoint with HF transformers (AutoModelForCausalLM, AutoTokenizer) and
generates from it: the check that the files are a real HF checkpoint. Needs torch, so it runs on
the GPU machine (CUDA when available, else CPU); elsewhere it is skipped (exit 77).

Checks: no missing, unexpected or mismatched weights; the model class is config.json's
architecture; model.num_parameters() equals the parameters stored in the safetensors files (and
--expect-params when given); the logits of a chat prompt are finite; greedy generation of
--new-tokens tokens (eos ignored) keeps every step's logits finite.

Usage:
  check_synth_transformers.py --kiln PATH/TO/kiln --work-dir DIR [--preset smollm2-135m]
  check_synth_transformers.py --model DIR --expect-params 8030261248     # an existing checkpoint
  e.g. kiln synth --preset llama-3.1-8b --out /tmp/l8 && \\
       check_synth_transformers.py --model /tmp/l8 --expect-params 8030261248
"""
import argparse
import glob
import json
import os
import subprocess
import sys


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def stored_parameters(model_dir):
    n = 0
    for path in glob.glob(os.path.join(model_dir, "*.safetensors")):
        with open(path, "rb") as f:
            header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
        for name, info in header.items():
            if name != "__metadata__":
                count = 1
                for d in info["shape"]:
                    count *= d
                n += count
    return n


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kiln")
    parser.add_argument("--work-dir")
    parser.add_argument("--preset", default="smollm2-135m")
    parser.add_argument("--model", help="check this existing checkpoint instead of writing one")
    parser.add_argument("--expect-params", type=int)
    parser.add_argument("--new-tokens", type=int, default=128)
    args = parser.parse_args()
    try:
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:
        print(f"SKIP: {e}")
        sys.exit(77)

    model_dir = args.model
    if model_dir is None:
        if not args.kiln or not args.work_dir:
            fail("give --model DIR, or --kiln and --work-dir")
        model_dir = os.path.join(args.work_dir, args.preset)
        subprocess.run([args.kiln, "synth", "--preset", args.preset, "--force", "--out", model_dir],
                       check=True, stdout=subprocess.DEVNULL)
    config = json.load(open(os.path.join(model_dir, "config.json")))

    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    dtype_key = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"
    model, info = AutoModelForCausalLM.from_pretrained(
        model_dir, output_loading_info=True, **{dtype_key: torch.bfloat16})
    for key in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        if info.get(key):
            fail(f"{key}: {info[key]}")
    if type(model).__name__ != config["architectures"][0]:
        fail(f"loaded {type(model).__name__}, config.json says {config['architectures'][0]}")
    n = model.num_parameters()
    if n != stored_parameters(model_dir):
        fail(f"model has {n} parameters, the safetensors files {stored_parameters(model_dir)}")
    if args.expect_params is not None and n != args.expect_params:
        fail(f"model has {n} parameters, expected {args.expect_params}")

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model.to(device).eval()
    tok = AutoTokenizer.from_pretrained(model_dir)
    if len(tok) != config["vocab_size"]:
        fail(f"tokenizer has {len(tok)} ids, config {config['vocab_size']}")
    text = tok.apply_chat_template([{"role": "user", "content": "Hello, 你好 🎉"}],
                                   add_generation_prompt=True, tokenize=False)
    ids = tok(text, add_special_tokens=False, return_tensors="pt").input_ids.to(device)
    with torch.no_grad():
        logits = model(ids).logits
        if not torch.isfinite(logits).all():
            fail("prompt logits are not finite")
        out = model.generate(ids, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                             do_sample=False, output_logits=True, return_dict_in_generate=True)
    if len(out.logits) != args.new_tokens:
        fail(f"generated {len(out.logits)} tokens, asked for {args.new_tokens}")
    for step, step_logits in enumerate(out.logits):  # raw logits, before any processor
        if not torch.isfinite(step_logits).all():
            fail(f"logits not finite at generated token {step}")
    new_ids = out.sequences[0, ids.shape[1]:].tolist()
    if max(new_ids) >= config["vocab_size"]:
        fail("generated an id outside the vocabulary")
    print(f"ok: {type(model).__name__}, {n} parameters, {args.new_tokens} tokens on {device}, "
          f"logits std {logits.float().std().item():.2f}: {tok.decode(new_ids[:16])!r}...")


if __name__ == "__main__":
    main()
