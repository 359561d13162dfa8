#!/usr/bin/env python3
"""HF transformers `generate` on the GPU, the baseline of cuda_bench's figure 5 (same workloads).

Batch 1 (prompt 128, 256 new tokens) and batch 64 (prompts of 1,024, 256 new tokens), bf16,
greedy, ignoring eos (min_new_tokens), with the default dynamic cache and with
cache_implementation="static" at batch 1. Prints a table and writes JSON.

usage: cuda_hf_baseline.py --model DIR [--json OUT] [--skip-batch64]
"""
import argparse
import json
import time

import torch
from transformers import AutoModelForCausalLM


def run(model, batch, prompt_len, new_tokens, **kwargs):
    gen = torch.Generator(device="cpu").manual_seed(batch)
    ids = torch.randint(3, model.config.vocab_size, (batch, prompt_len), generator=gen).cuda()
    mask = torch.ones_like(ids)
    model.generate(ids[:, :16], attention_mask=mask[:, :16], max_new_tokens=4, do_sample=False,
                   min_new_tokens=4, **kwargs)  # warm-up
    torch.cuda.synchronize()
    t = time.perf_counter()
    out = model.generate(ids, attention_mask=mask, max_new_tokens=new_tokens,
                         min_new_tokens=new_tokens, do_sample=False, **kwargs)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t
    generated = (out.shape[1] - prompt_len) * batch
    print(f"HF generate batch {batch:3d} prompt {prompt_len:5d} new {new_tokens} "
          f"{kwargs.get('cache_implementation', 'dynamic'):8s}: {generated / seconds:9.1f} tok/s",
          flush=True)
    return {"batch": batch, "prompt_len": prompt_len, "new_tokens": new_tokens,
            "seconds": seconds, "output_tok_s": generated / seconds, **{k: str(v) for k, v in kwargs.items()}}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--json")
    p.add_argument("--skip-batch64", action="store_true")
    p.add_argument("--skip-static", action="store_true")
    a = p.parse_args()
    t = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16).cuda().eval()
    load_s = time.perf_counter() - t
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    results = {"torch": torch.__version__, "device": torch.cuda.get_device_name(), "load_seconds": load_s,
               "runs": []}
    results["runs"].append(run(model, 1, 128, 256))
    if not a.skip_batch64:
        results["runs"].append(run(model, 64, 1024, 256))
    if a.json:  # the static-cache run compiles for a while: keep what is measured so far
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)
    if not a.skip_static:
        results["runs"].append(run(model, 1, 128, 256, cache_implementation="static"))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
