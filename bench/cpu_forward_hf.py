#!/usr/bin/env python3
"""Baseline for cpu_forward_bench: HF transformers generating on the CPU with the same model.

usage: "$TORCH_PYTHON" bench/cpu_forward_hf.py [--gguf PATH] [--threads N]
           [--prompt 128] [--decode 64] [--batch 16]

The GGUF is dequantized to an f32 HF checkpoint exactly as tests/golden/make_golden.py does
(and kiln computes with those same f32 values), loaded with torch float32 and its default
attention (sdpa), and timed with `generate(do_sample=False)` on the prompts cpu_forward_bench
uses. Decode tok/s = (tokens of generate(1 + decode) - tokens of generate(1)) / time difference,
so the prefill is excluded the same way. Needs torch, transformers, gguf, safetensors.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import torch
import transformers

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "golden"))
from make_golden import hf_checkpoint  # noqa: E402


def prompt_ids(vocab, batch, prompt, first):
    """cpu_forward_bench's prompts: sequence s, token i = (7919 (i + 1) + 104729 s) % (vocab - 1)."""
    return torch.tensor([[(7919 * (i + 1) + 104729 * s) % (vocab - 1) for i in range(prompt)]
                         for s in range(first, first + batch)])


def timed_generate(model, ids, new_tokens):
    t0 = time.perf_counter()
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=new_tokens, eos_token_id=None, pad_token_id=0)
    assert out.shape[1] == ids.shape[1] + new_tokens
    return time.perf_counter() - t0


def decode_tok_s(model, ids, decode):
    timed_generate(model, ids, 2)  # warm-up
    prefill_s = min(timed_generate(model, ids, 1) for _ in range(2))
    total_s = timed_generate(model, ids, 1 + decode)
    return ids.shape[0] * decode / (total_s - prefill_s), prefill_s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", default=os.environ.get("KILN_DEFAULT_MODEL"))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--decode", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    args = ap.parse_args()
    if not args.gguf:
        sys.exit("give --gguf or set KILN_DEFAULT_MODEL")
    torch.set_num_threads(args.threads)
    tmp = tempfile.mkdtemp(prefix="kiln_hf_bench_")
    try:
        config, _ = hf_checkpoint(args.gguf, tmp)
        model = transformers.LlamaForCausalLM.from_pretrained(tmp, dtype=torch.float32)
        model.eval()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    vocab = config["vocab_size"]
    one, one_prefill = decode_tok_s(model, prompt_ids(vocab, 1, args.prompt, 0), args.decode)
    many, _ = decode_tok_s(model, prompt_ids(vocab, args.batch, args.prompt, 1), args.decode)
    result = {
        "bench": "cpu_forward_hf", "threads": args.threads, "torch": torch.__version__,
        "transformers": transformers.__version__, "attention": model.config._attn_implementation,
        "prompt_tokens": args.prompt, "prefill_tok_s": round(args.prompt / one_prefill, 1),
        "decode_steps": args.decode, "batch1_decode_tok_s": round(one, 2), "batch": args.batch,
        "batch_decode_tok_s": round(many, 2),
    }
    print(json.dumps(result))
    print(f"\n{'HF transformers (CPU, f32)':34} {'value':>12}")
    print(f"{'threads':34} {args.threads:>12}")
    print(f"{'prefill (tok/s, 1 seq, incl. 1 step)':34} {args.prompt / one_prefill:>12.1f}")
    print(f"{'batch 1 decode (tok/s)':34} {one:>12.2f}")
    print(f"{f'batch {args.batch} decode (tok/s)':34} {many:>12.2f}")


if __name__ == "__main__":
    main()
