#!/usr/bin/env python3
"""Write synthetic checkpoints with `kiln synth` and check them with HF transformers (GPU machine).

For each preset: time `kiln synth`, read `kiln inspect --json`, load the directory with
transformers' AutoModelForCausalLM.from_pretrained, compare parameter counts, run a forward pass
over a long prompt and a short greedy generation on the GPU (activations must stay finite), and
check the tokenizer with AutoTokenizer. Prints a table and writes JSON.

usage: check_synth.py --kiln "RUNNER kiln" --workdir DIR --json OUT.json [--preset NAME ...]
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import time


def run(cmd):
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p.stdout, time.perf_counter() - t


def dir_bytes(path):
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))


def check(kiln, preset, workdir, threads):
    import torch
    import transformers

    out = os.path.join(workdir, preset)
    _, synth_s = run(kiln + ["synth", "--preset", preset, "--out", out, "--force",
                             "--threads", str(threads)])
    size = dir_bytes(out)
    inspect = json.loads(run(kiln + ["inspect", out, "--json"])[0])
    r = {"preset": preset, "synth_seconds": round(synth_s, 2), "bytes": size,
         "write_gb_per_s": round(size / synth_s / 1e9, 2), "threads": threads,
         "kiln_num_parameters": inspect["num_parameters"]}

    t = time.perf_counter()
    model = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.bfloat16,
                                                              device_map="cuda")
    r["hf_load_seconds"] = round(time.perf_counter() - t, 2)
    r["hf_class"] = type(model).__name__
    r["hf_num_parameters"] = sum(p.numel() for p in model.parameters())
    tok = transformers.AutoTokenizer.from_pretrained(out)
    r["tokenizer_len"] = len(tok)
    text = "Hello, kiln! 你好 🙂 def f(x):\n    return x"
    r["tokenizer_roundtrip"] = tok.decode(tok.encode(text, add_special_tokens=False)) == text
    torch.manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (1, 1024), device="cuda")
    with torch.no_grad():
        logits = model(ids).logits.float()
        r["logits_finite"] = bool(torch.isfinite(logits).all())
        r["logits_abs_max"] = round(float(logits.abs().max()), 4)
        gen = model.generate(ids[:, :16], max_new_tokens=256, do_sample=False,
                             min_new_tokens=256, pad_token_id=0)
        last = model(gen).logits.float()
        r["generate_256_finite"] = bool(torch.isfinite(last).all())
        r["generate_256_abs_max"] = round(float(last.abs().max()), 4)
    del model
    torch.cuda.empty_cache()
    r["ok"] = (r["hf_num_parameters"] == r["kiln_num_parameters"] and r["logits_finite"]
               and r["generate_256_finite"] and r["tokenizer_roundtrip"]
               and r["tokenizer_len"] == inspect["vocab_size"])
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True, help="command that runs kiln, e.g. 'build/kiln'")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--preset", action="append")
    a = ap.parse_args()
    presets = a.preset or ["smollm2-135m", "llama-3.1-8b"]
    results = []
    for p in presets:
        try:
            results.append(check(shlex.split(a.kiln), p, a.workdir, a.threads))
        except Exception as e:  # report and go on with the next preset
            results.append({"preset": p, "ok": False, "error": str(e)[-2000:]})
        subprocess.run(["rm", "-rf", os.path.join(a.workdir, p)])
        print(json.dumps(results[-1]), flush=True)
    with open(a.json, "w") as f:
        json.dump(results, f, indent=2)
    print(f"\n{'preset':<16}{'GB':>7}{'synth s':>9}{'GB/s':>7}{'kiln params':>16}"
          f"{'HF params':>16}{'finite':>8}{'ok':>5}")
    for r in results:
        if "error" in r:
            print(f"{r['preset']:<16} ERROR {r['error'][-300:]}")
            continue
        print(f"{r['preset']:<16}{r['bytes']/1e9:>7.2f}{r['synth_seconds']:>9.1f}"
              f"{r['write_gb_per_s']:>7.2f}{r['kiln_num_parameters']:>16,}"
              f"{r['hf_num_parameters']:>16,}{str(r['generate_256_finite']):>8}{str(r['ok']):>5}")
    sys.exit(0 if all(r["ok"] for r in results) else 1)


if __name__ == "__main__":
    main()
