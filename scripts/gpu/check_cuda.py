#!/usr/bin/env python3
"""Whole-model check of the CUDA backend (run on the GPU machine): a synthetic checkpoint, greedy
generation by `kiln generate --device cuda` and `--device cpu` on the same token-id prompts, and
HF transformers (in kiln's dtype, same GPU) teacher-forced on kiln's tokens.

Reports per model: greedy tokens equal CUDA vs CPU (else the first divergence and the CPU's
top-2 gap there), and max |dlogprob| over the reference's top-20 at every generated position
(up to the first divergence) for CUDA vs CPU, CUDA vs HF in kiln's dtype, and, as the yardstick,
HF in that dtype vs HF fp32 and CUDA vs HF fp32 (both teacher-forced on kiln's tokens). kiln's
dtype is --dtype, or for auto the one `kiln generate` picks (fp16 for GGUF and float16
checkpoints, else bf16). Exit 1 when CUDA's error against HF fp32 exceeds HF's own in the same
dtype (x1.25, or 0.05 nats when that is smaller), or CUDA and CPU
part after a gap that the measured error does not explain (top-2 gap >= 0.05 and >= twice the
CUDA-vs-CPU error).

With --quantization fp8 and/or --kv-cache-dtype fp8 both backends run quantized (the CPU backend
is the FP8 reference, model/quantization.h): CUDA vs CPU is checked as above, and the distance to
HF fp32 is reported (the quantization error) but not bounded.

usage: check_cuda.py --kiln "RUNNER kiln" --model DIR|FILE.gguf --json OUT [--lengths 7,83,300]
       [--new 16] [--vocab N] [--dtype auto|bfloat16|float16] [--skip-cpu] [--skip-hf]
       [--quantization none|fp8] [--kv-cache-dtype auto|fp8]

A .gguf model (e.g. the default SmolLM2-135M-Instruct Q4_1) needs --vocab; transformers reads it
with its GGUF loader (the `gguf` package), dequantized to the compared dtype.
"""
import argparse
import json
import os
import random
import shlex
import subprocess
import sys
import tempfile
import time

NEAR_TIE = 0.05


def generate(kiln, model, prompts_file, device, new_tokens, extra=()):
    t = time.perf_counter()
    p = subprocess.run(kiln + ["generate", model, "--device", device, *extra, "--input", prompts_file,
                               "--output", "jsonl", "--max-tokens", str(new_tokens),
                               "--temperature", "0", "--ignore-eos", "--logprobs", "20",
                               "--max-model-len", "4096"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"kiln generate --device {device} failed: {p.stderr[-3000:]}")
    return [json.loads(line) for line in p.stdout.splitlines() if line.strip()], time.perf_counter() - t


def top_map(scored):
    return {tid: lp for tid, lp in scored["top"]}


def compare(ref_lines, got_lines, label, report, bound=None):
    max_diff, divergences = 0.0, []
    for ref, got in zip(ref_lines, got_lines):
        rc, gc = ref["completions"][0], got["completions"][0]
        for i, (rt, gt) in enumerate(zip(rc["token_ids"], gc["token_ids"])):
            rtop, gtop = top_map(rc["logprobs"][i]), top_map(gc["logprobs"][i])
            for tid, lp in rtop.items():
                if tid in gtop:
                    max_diff = max(max_diff, abs(lp - gtop[tid]))
            if rt != gt:
                tops = rc["logprobs"][i]["top"]
                gap = tops[0][1] - tops[1][1]
                divergences.append({"prompt": ref["index"], "token": i, "gap": gap})
                break
    explained = max(NEAR_TIE, 2 * max_diff)
    ok = all(d["gap"] < explained for d in divergences) and (bound is None or max_diff <= bound)
    report[label] = {"max_dlogprob": max_diff, "divergences": divergences, "ok": ok}
    print(f"{label}: max |dlogprob| {max_diff:.4f}, divergences {divergences} -> {'ok' if ok else 'FAIL'}")
    return ok


def hf_logprobs(model_dir, lines, dtype):
    import torch
    from transformers import AutoModelForCausalLM
    if model_dir.endswith(".gguf"):
        model = AutoModelForCausalLM.from_pretrained(
            os.path.dirname(os.path.abspath(model_dir)), gguf_file=os.path.basename(model_dir),
            dtype=getattr(torch, dtype)).cuda().eval()
    else:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype)).cuda().eval()
    out = []
    for line in lines:
        prompt = line["prompt_token_ids"]
        gen = line["completions"][0]["token_ids"]
        ids = torch.tensor([prompt + gen], device="cuda")
        with torch.no_grad():
            logits = model(ids).logits[0].float()
        lp = torch.log_softmax(logits, dim=-1)
        scored = []
        for i in range(len(gen)):
            row = lp[len(prompt) - 1 + i]
            vals, idx = torch.topk(row, 20)
            scored.append({"token_id": int(torch.argmax(row)),
                           "top": [[int(a), float(b)] for a, b in zip(idx.tolist(), vals.tolist())]})
        out.append({"index": line["index"], "prompt_token_ids": prompt,
                    "completions": [{"token_ids": [s["token_id"] for s in scored], "logprobs": scored}]})
    del model
    torch.cuda.empty_cache()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--lengths", default="7,83,300,769,1500")
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=0)
    ap.add_argument("--dtype", default="auto", choices=("auto", "bfloat16", "float16"))
    ap.add_argument("--skip-cpu", action="store_true")
    ap.add_argument("--skip-hf", action="store_true")
    ap.add_argument("--quantization", default="none")
    ap.add_argument("--kv-cache-dtype", default="auto")
    a = ap.parse_args()
    quant = ["--quantization", a.quantization, "--kv-cache-dtype", a.kv_cache_dtype]
    quantized = a.quantization != "none" or a.kv_cache_dtype != "auto"
    kiln = shlex.split(a.kiln)
    if a.model.endswith(".gguf"):
        if not a.vocab:
            sys.exit("check_cuda.py: a .gguf model needs --vocab")
        vocab = a.vocab
    else:
        config = json.load(open(os.path.join(a.model, "config.json")))
        vocab = a.vocab or config["vocab_size"]
    dtype = a.dtype
    if dtype == "auto":  # DefaultCudaDType (src/backend/cuda/cuda_runner.h)
        declared = "" if a.model.endswith(".gguf") else config.get("torch_dtype", config.get("dtype", ""))
        dtype = "float16" if a.model.endswith(".gguf") or declared == "float16" else "bfloat16"
    short = {"bfloat16": "bf16", "float16": "fp16"}[dtype]
    rng = random.Random(5)
    prompts = tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False)
    for n in (int(x) for x in a.lengths.split(",")):
        prompts.write(json.dumps({"prompt_token_ids": [rng.randrange(3, min(vocab, 30000)) for _ in range(n)]}) + "\n")
    prompts.close()
    report = {"model": a.model, "lengths": a.lengths, "new_tokens": a.new, "dtype": dtype,
              "quantization": a.quantization, "kv_cache_dtype": a.kv_cache_dtype}
    ok = True
    cuda, report["cuda_seconds"] = generate(kiln, a.model, prompts.name, "cuda", a.new,
                                            ["--dtype", dtype, *quant])
    if not a.skip_cpu:
        cpu, report["cpu_seconds"] = generate(kiln, a.model, prompts.name, "cpu", a.new, quant)
        ok &= compare(cpu, cuda, "cuda_vs_cpu", report)
        report["cuda_vs_cpu"]["identical_prompts"] = sum(
            c["completions"][0]["token_ids"] == g["completions"][0]["token_ids"]
            for c, g in zip(cpu, cuda))
        print(f"cuda_vs_cpu: {report['cuda_vs_cpu']['identical_prompts']} of {len(cpu)} prompts "
              f"give identical greedy tokens")
    if not a.skip_hf:
        # HF is teacher-forced on kiln's tokens, so only logprobs are compared (tokens are kiln's).
        hf = {}
        for hf_dtype in (dtype, "float32"):
            hf[hf_dtype] = hf_logprobs(a.model, cuda, hf_dtype)
            for line in hf[hf_dtype]:
                line["completions"][0]["token_ids"] = next(
                    c for c in cuda if c["index"] == line["index"])["completions"][0]["token_ids"]
        compare(hf["float32"], hf[dtype], f"hf_{short}_vs_hf_fp32", report)
        yardstick = report[f"hf_{short}_vs_hf_fp32"]["max_dlogprob"]
        bound = max(0.05, 1.25 * yardstick)
        within = compare(hf["float32"], cuda, "cuda_vs_hf_fp32", report, bound=bound)
        if not quantized:  # quantized: the distance is the quantization's error, reported only
            ok &= within
        compare(hf[dtype], cuda, f"cuda_vs_hf_{short}", report)
    report["ok"] = ok
    json.dump(report, open(a.json, "w"), indent=2)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
