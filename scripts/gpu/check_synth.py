#!/usr/bin/env python3
"""Times `kiln synth` and checks what it wrote with HF transformers (run on the GPU machine).

For each preset: write the checkpoint with `kiln synth` (all cores), read `kiln inspect --json`,
then run tests/builder/check_synth_transformers.py on it (loads it with AutoModelForCausalLM,
compares parameter counts with the published ones, generates on the GPU with finite logits).
Prints a table and writes JSON.

usage: check_synth.py --kiln "RUNNER kiln" --workdir DIR --json OUT.json [--preset NAME ...]
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CHECK = os.path.join(HERE, "..", "..", "tests", "builder", "check_synth_transformers.py")
PUBLISHED = {"smollm2-135m": 134515008, "llama-3.1-8b": 8030261248, "mistral-7b": 7248023552,
             "qwen2-7b": 7615616512}


def check(kiln, preset, workdir, threads):
    out = os.path.join(workdir, preset)
    t = time.perf_counter()
    synth = subprocess.run(kiln + ["synth", "--preset", preset, "--out", out, "--force",
                                   "--threads", str(threads)], capture_output=True, text=True)
    synth_s = time.perf_counter() - t
    if synth.returncode != 0:
        return {"preset": preset, "ok": False, "error": synth.stderr[-2000:]}
    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    inspect = json.loads(subprocess.run(kiln + ["inspect", out, "--json"], capture_output=True,
                                        text=True, check=True).stdout)
    r = {"preset": preset, "synth_seconds": round(synth_s, 2), "bytes": size,
         "write_gb_per_s": round(size / synth_s / 1e9, 2), "threads": threads,
         "synth_output": synth.stdout.strip(), "kiln_num_parameters": inspect["num_parameters"],
         "published_parameters": PUBLISHED.get(preset), "inspect": inspect}
    t = time.perf_counter()
    hf = subprocess.run([sys.executable, CHECK, "--model", out, "--expect-params",
                         str(PUBLISHED.get(preset, inspect["num_parameters"]))],
                        capture_output=True, text=True)
    r["hf_check_seconds"] = round(time.perf_counter() - t, 2)
    r["hf_check"] = (hf.stdout + hf.stderr).strip()[-1500:]
    r["ok"] = hf.returncode == 0 and r["kiln_num_parameters"] == r["published_parameters"]
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True, help="command that runs kiln, e.g. 'build/kiln'")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--preset", action="append")
    a = ap.parse_args()
    results = []
    for p in a.preset or ["smollm2-135m", "llama-3.1-8b"]:
        results.append(check(shlex.split(a.kiln), p, a.workdir, a.threads))
        subprocess.run(["rm", "-rf", os.path.join(a.workdir, p)])
        print(json.dumps(results[-1]), flush=True)
    with open(a.json, "w") as f:
        json.dump(results, f, indent=2)
    print(f"\n{'preset':<14}{'GB':>7}{'synth s':>9}{'GB/s':>7}{'threads':>8}{'kiln params':>16}"
          f"{'HF check s':>11}{'ok':>6}")
    for r in results:
        if "error" in r:
            print(f"{r['preset']:<14} synth failed: {r['error'][-300:]}")
            continue
        print(f"{r['preset']:<14}{r['bytes'] / 1e9:>7.2f}{r['synth_seconds']:>9.1f}"
              f"{r['write_gb_per_s']:>7.2f}{r['threads']:>8}{r['kiln_num_parameters']:>16,}"
              f"{r['hf_check_seconds']:>11.1f}{str(r['ok']):>6}")
        print(f"  {r['hf_check'].splitlines()[-1] if r['hf_check'] else ''}")
    sys.exit(0 if all(r["ok"] for r in results) else 1)


if __name__ == "__main__":
    main()
