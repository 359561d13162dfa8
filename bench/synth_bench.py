#!/usr/bin/env python3
"""Benchmark: how fast `kiln synth` writes a synthetic checkpoint, against its yardsticks.

Measured in one run on one machine:
  kiln     `kiln synth --preset P` (all cores), best of --repeats runs
  roofline writing the same number of bytes through the page cache with `dd` from /dev/zero
           (no generation at all: the floor for any writer that uses write(2))
  baseline what a user does with HF transformers: build the model from config.json on the CPU
           (`AutoModelForCausalLM.from_config`, bf16, HF's own normal(0, 0.02) init) and
           `save_pretrained` it as safetensors

Prints JSON (to --json) and a table.
usage: synth_bench.py --kiln "RUNNER kiln" --workdir DIR --json OUT.json [--preset llama-3.1-8b]
"""
import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time


def dir_bytes(path):
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))


def timed(cmd):
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--preset", default="llama-3.1-8b")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--skip-hf", action="store_true")
    a = ap.parse_args()
    kiln = shlex.split(a.kiln)
    os.makedirs(a.workdir, exist_ok=True)
    out = os.path.join(a.workdir, "kiln")
    r = {"preset": a.preset, "threads": os.cpu_count()}

    runs = []
    for _ in range(a.repeats):
        shutil.rmtree(out, ignore_errors=True)
        runs.append(timed(kiln + ["synth", "--preset", a.preset, "--out", out]))
    r["bytes"] = dir_bytes(out)
    r["kiln_seconds"] = [round(x, 2) for x in runs]
    r["kiln_gb_per_s"] = round(r["bytes"] / min(runs) / 1e9, 2)
    shutil.rmtree(out)

    zero = os.path.join(a.workdir, "zero")
    mib = r["bytes"] // (1 << 20)
    dd = timed(["dd", "if=/dev/zero", f"of={zero}", "bs=1M", f"count={mib}"])
    os.remove(zero)
    r["dd_seconds"] = round(dd, 2)
    r["dd_gb_per_s"] = round(mib * (1 << 20) / dd / 1e9, 2)

    if not a.skip_hf:
        import torch
        import transformers
        subprocess.run(kiln + ["synth", "--preset", a.preset, "--out", out, "--no-weights"],
                       check=True, stdout=subprocess.DEVNULL)
        torch.set_num_threads(os.cpu_count())
        config = transformers.AutoConfig.from_pretrained(out)
        t = time.perf_counter()
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
        init_s = time.perf_counter() - t
        hf_out = os.path.join(a.workdir, "hf")
        t = time.perf_counter()
        model.save_pretrained(hf_out)
        save_s = time.perf_counter() - t
        r["hf_init_seconds"] = round(init_s, 2)
        r["hf_save_seconds"] = round(save_s, 2)
        r["hf_seconds"] = round(init_s + save_s, 2)
        r["hf_bytes"] = dir_bytes(hf_out)
        r["hf_gb_per_s"] = round(r["hf_bytes"] / (init_s + save_s) / 1e9, 2)
        r["speedup_vs_hf"] = round((init_s + save_s) / min(runs), 1)
        del model
        shutil.rmtree(hf_out)
        shutil.rmtree(out)

    with open(a.json, "w") as f:
        json.dump(r, f, indent=2)
    print(json.dumps(r))
    print(f"\n{a.preset}: {r['bytes'] / 1e9:.2f} GB, {r['threads']} threads")
    print(f"{'writer':<34}{'seconds':>9}{'GB/s':>7}")
    print(f"{'kiln synth (best of %d)' % a.repeats:<34}{min(runs):>9.2f}{r['kiln_gb_per_s']:>7.2f}")
    print(f"{'roofline: dd /dev/zero, same bytes':<34}{dd:>9.2f}{r['dd_gb_per_s']:>7.2f}")
    if "hf_seconds" in r:
        print(f"{'HF from_config + save_pretrained':<34}{r['hf_seconds']:>9.2f}"
              f"{r['hf_gb_per_s']:>7.2f}   (kiln {r['speedup_vs_hf']}x faster)")


if __name__ == "__main__":
    sys.exit(main())
