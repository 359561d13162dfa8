#!/usr/bin/env python3
"""HF transformers `generate` on the GPU: the baseline rows of the `kiln bench` report.

For a local HF checkpoint (the synthetic Llama-3.1-8B: `kiln synth --preset llama-3.1-8b`),
loaded as `AutoModelForCausalLM.from_pretrained(dir, dtype=torch.bfloat16).cuda().eval()` with eos
disabled (as bench/cuda_hf_baseline.py does), measures:

  offline throughput, for each ISL/OSL workload (default 128/128, 128/2048, 1000/1000, 2048/128,
    5000/500): random-token prompts (uniform over the non-special ids, seeded), greedy,
    min_new_tokens = max_new_tokens = OSL, in static batches of --batch prompts (default 64) with
    HF's default dynamic cache, --batches batches per workload (default 1). Output tok/s =
    generated tokens / wall seconds of the `generate` calls, prefill included. A batch that runs
    out of memory is retried at half the size (down to 1); the batch size used is recorded. A
    batch size whose KV cache alone (batch x (ISL + OSL) x KV bytes per token, x 1.2 for the
    dynamic cache's concatenation copies) would not fit in the free memory is halved before
    trying, so a late out-of-memory in decode does not waste minutes.
  serving-style latency ("latency", default ISL 467 / OSL 256, batch 1): TTFT = the wall time of a
    `generate` with max_new_tokens = 1; ITL = (time of a 256-token `generate` - TTFT) / 255;
    medians over --latency-runs runs (default 3), each run with its own prompt.

Every `generate` has one untimed warm-up at the same batch size first (16-token prompts, 4 new
tokens). Time guard: --max-seconds (default 540, from the start of the script, loading
included) passes the time left as `generate(max_time=...)`, so a workload that would run past it
stops early (recorded as "truncated", with the tokens really generated), and the workloads after
it are skipped ("skipped"). Estimate for the defaults on an H100, from HF's earlier figures
(bench/results/2026-11-22-hf-baseline-8b-h100.json: ~90 ms per decode step at batch 1 and at
batch 64): 128/2048 ~190 s, 1000/1000 ~100 s, 5000/500 ~60 s (likely at batch 32, after a quick
out-of-memory in the prefill at 64), latency ~70 s, the rest ~30 s: ~8 minutes with loading;
--max-seconds caps it anyway.

--workloads picks a subset, in the order given: e.g. `128/128,1000/1000,latency`. --json writes
everything measured so far after each workload (the run may be cut off). A table is printed at
the end; torch / transformers / CUDA versions and the GPU name are recorded.

usage: hf_workloads.py --model DIR [--workloads LIST] [--batch 64] [--batches 1] [--json OUT]
                       [--max-seconds 540]
"""
import argparse
import datetime
import gc
import json
import platform
import statistics
import sys
import time

DEFAULT_WORKLOADS = "128/128,128/2048,1000/1000,2048/128,5000/500,latency"

_T0 = time.perf_counter()  # the --max-seconds budget counts from here


def parse_workloads(spec):
    out = []
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        if item == "latency":
            out.append(("latency", None, None))
            continue
        try:
            isl, osl = (int(x) for x in item.split("/"))
        except ValueError:
            raise argparse.ArgumentTypeError(f"bad workload {item!r}: expected ISL/OSL or latency")
        if isl < 1 or osl < 1:
            raise argparse.ArgumentTypeError(f"bad workload {item!r}: lengths must be >= 1")
        out.append((item, isl, osl))
    if not out:
        raise argparse.ArgumentTypeError("no workloads")
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="local HF checkpoint directory")
    p.add_argument("--workloads", type=parse_workloads, default=parse_workloads(DEFAULT_WORKLOADS),
                   help=f"comma-separated ISL/OSL pairs and/or 'latency' (default "
                        f"{DEFAULT_WORKLOADS})")
    p.add_argument("--batch", type=int, default=64, help="static batch size to start from")
    p.add_argument("--batches", type=int, default=1, help="timed batches per workload")
    p.add_argument("--latency-isl", type=int, default=467)
    p.add_argument("--latency-osl", type=int, default=256)
    p.add_argument("--latency-runs", type=int, default=3)
    p.add_argument("--max-seconds", type=float, default=540,
                   help="time budget from the start, loading included (default 540)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write the results here (after every workload)")
    a = p.parse_args()
    if a.batch < 1 or a.batches < 1 or a.latency_runs < 1 or a.latency_osl < 2:
        p.error("--batch, --batches, --latency-runs must be >= 1 and --latency-osl >= 2")

    try:
        import torch
        import transformers
        from transformers import AutoModelForCausalLM
    except ImportError as e:
        sys.exit(f"hf_workloads.py: error: {e} (needs torch and transformers: the GPU machine)")

    if not torch.cuda.is_available():
        sys.exit("hf_workloads.py: error: no CUDA device (this baseline runs on the GPU machine)")

    deadline = _T0 + a.max_seconds

    def left():
        return deadline - time.perf_counter()

    t = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16).cuda().eval()
    load_s = time.perf_counter() - t
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    cfg = model.config
    vocab = cfg.vocab_size
    # Prompts avoid the special tokens: Llama 3's sit at the top of the vocabulary (bos 128000).
    bos = cfg.bos_token_id if isinstance(cfg.bos_token_id, int) else None
    id_high = bos if bos is not None and bos > vocab // 2 else vocab
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    kv_bytes_per_token = 2 * cfg.num_hidden_layers * kv_heads * head_dim * 2  # K and V, bf16
    weight_bytes = sum(t.numel() * t.element_size() for t in model.parameters())

    results = {
        "tool": "bench/hf_workloads.py",
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "host": platform.node(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(),
        "device_memory_bytes": torch.cuda.get_device_properties(0).total_memory,
        "model": a.model,
        "model_type": cfg.model_type,
        "num_parameters": sum(t.numel() for t in model.parameters()),
        "weight_bytes": weight_bytes,
        "kv_bytes_per_token": kv_bytes_per_token,
        "attn_implementation": getattr(cfg, "_attn_implementation", None),
        "dtype": "bfloat16",
        "cache": "dynamic (HF default)",
        "decoding": "greedy, min_new_tokens = max_new_tokens, eos disabled",
        "load_seconds": load_s,
        "max_seconds": a.max_seconds,
        "args": {"batch": a.batch, "batches": a.batches, "seed": a.seed,
                 "latency_isl": a.latency_isl, "latency_osl": a.latency_osl,
                 "latency_runs": a.latency_runs},
        "workloads": [],
    }
    print(f"{results['device']}, torch {results['torch']}, transformers "
          f"{results['transformers']}, model {a.model} ({results['num_parameters'] / 1e9:.2f} B "
          f"params, loaded in {load_s:.1f} s)", flush=True)

    def save():
        results["elapsed_seconds"] = time.perf_counter() - _T0
        if a.json:
            with open(a.json, "w") as f:
                json.dump(results, f, indent=2)
                f.write("\n")

    def prompts(batch, length, salt):
        gen = torch.Generator(device="cpu").manual_seed(a.seed * 1_000_003 + salt)
        ids = torch.randint(3, id_high, (batch, length), generator=gen).cuda()
        return ids, torch.ones_like(ids)

    def generate(ids, mask, new_tokens, max_time=None):
        """One timed `generate`: (seconds, tokens generated per sequence)."""
        torch.cuda.synchronize()
        t = time.perf_counter()
        kwargs = {"max_time": max_time} if max_time is not None else {}
        out = model.generate(ids, attention_mask=mask, max_new_tokens=new_tokens,
                             min_new_tokens=new_tokens, do_sample=False, **kwargs)
        torch.cuda.synchronize()
        seconds = time.perf_counter() - t
        generated = out.shape[1] - ids.shape[1]
        del out
        return seconds, generated

    def warm(batch):
        ids, mask = prompts(batch, 16, 999)
        generate(ids, mask, 4)

    def free_memory():
        gc.collect()
        torch.cuda.empty_cache()

    oom_type = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError

    def is_oom(e):
        return isinstance(e, oom_type) or "out of memory" in str(e).lower()

    def throughput(name, isl, osl):
        rec = {"workload": name, "kind": "throughput", "isl": isl, "osl": osl,
               "batch_requested": a.batch, "oom_halvings": [], "preflight_halvings": []}
        batch = a.batch
        free_memory()
        free_bytes = torch.cuda.mem_get_info()[0]
        while batch > 1 and batch * (isl + osl) * kv_bytes_per_token * 1.2 > 0.9 * free_bytes:
            rec["preflight_halvings"].append(batch)
            batch //= 2
        runs = []
        index = 0
        while index < a.batches:
            if left() <= 0:
                rec["truncated"] = True
                break
            failure = None
            try:
                warm(batch)
                ids, mask = prompts(batch, isl, isl * 7919 + osl * 31 + index)
                seconds, generated = generate(ids, mask, osl, max_time=max(left(), 1.0))
            except RuntimeError as e:  # torch.OutOfMemoryError is a RuntimeError
                failure = (is_oom(e), f"{type(e).__name__}: {str(e)[:300]}")
            ids = mask = None
            if failure is not None:
                # Outside the except block: the traceback (and the tensors its frames hold) is
                # gone, so the memory can really be given back.
                free_memory()
                oom, message = failure
                if not oom or batch == 1:
                    rec["error"] = message
                    break
                rec["oom_halvings"].append(batch)
                print(f"  {name}: out of memory at batch {batch}, retrying at {batch // 2}",
                      flush=True)
                batch //= 2
                continue
            runs.append({"batch": batch, "seconds": seconds, "new_tokens": generated,
                         "generated_tokens": generated * batch,
                         "output_tok_s": generated * batch / seconds})
            if generated < osl:
                rec["truncated"] = True
                break
            index += 1
        rec["batch"] = batch
        rec["runs"] = runs
        rec["peak_memory_bytes"] = torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        if runs:
            tokens = sum(r["generated_tokens"] for r in runs)
            seconds = sum(r["seconds"] for r in runs)
            rec["generated_tokens"] = tokens
            rec["seconds"] = seconds
            rec["output_tok_s"] = tokens / seconds
        rec.setdefault("truncated", False)
        return rec

    def latency(name):
        isl, osl = a.latency_isl, a.latency_osl
        rec = {"workload": name, "kind": "latency", "isl": isl, "osl": osl, "batch": 1,
               "runs": []}
        warm(1)
        for i in range(a.latency_runs):
            if left() <= 0:
                rec["truncated"] = True
                break
            ids, mask = prompts(1, isl, 4_000_037 + i)
            ttft, _ = generate(ids, mask, 1)
            total, generated = generate(ids, mask, osl, max_time=max(left(), 1.0))
            if generated < osl:
                rec["truncated"] = True
                break
            rec["runs"].append({"ttft_s": ttft, "total_s": total,
                                "itl_s": (total - ttft) / (osl - 1)})
        if rec["runs"]:
            rec["ttft_ms"] = statistics.median(r["ttft_s"] for r in rec["runs"]) * 1000
            rec["itl_ms"] = statistics.median(r["itl_s"] for r in rec["runs"]) * 1000
            rec["decode_tok_s"] = 1000 / rec["itl_ms"]
        rec.setdefault("truncated", False)
        return rec

    for name, isl, osl in a.workloads:
        if left() <= 0:
            results["workloads"].append({"workload": name, "skipped": True,
                                         "reason": f"--max-seconds {a.max_seconds} reached"})
            print(f"{name}: skipped (--max-seconds {a.max_seconds} reached)", flush=True)
            save()
            continue
        t = time.perf_counter()
        try:
            rec = latency(name) if isl is None else throughput(name, isl, osl)
        except RuntimeError as e:
            rec = {"workload": name, "error": f"{type(e).__name__}: {str(e)[:300]}"}
            free_memory()
        rec["wall_seconds"] = time.perf_counter() - t
        results["workloads"].append(rec)
        save()
        if "output_tok_s" in rec:
            print(f"{name}: batch {rec['batch']} x {len(rec['runs'])}: "
                  f"{rec['output_tok_s']:.1f} output tok/s"
                  + (" (TRUNCATED by --max-seconds)" if rec.get("truncated") else ""),
                  flush=True)
        elif "ttft_ms" in rec:
            print(f"{name}: ISL {rec['isl']} OSL {rec['osl']} batch 1: TTFT {rec['ttft_ms']:.1f} "
                  f"ms, ITL {rec['itl_ms']:.2f} ms (median of {len(rec['runs'])})", flush=True)
        else:
            print(f"{name}: no result ({rec.get('error', 'out of time')})", flush=True)

    print()
    print(f"HF transformers {results['transformers']} generate, bf16, {results['device']}")
    print(f"{'workload':<12} {'batch':>5} {'batches':>7} {'output tok/s':>12} {'TTFT ms':>8} "
          f"{'ITL ms':>7} {'wall s':>7}  note")
    for r in results["workloads"]:
        note = ("skipped" if r.get("skipped") else "TRUNCATED" if r.get("truncated")
                else r.get("error", ""))
        if r.get("oom_halvings") or r.get("preflight_halvings"):
            note += f" (batch halved from {r['batch_requested']})"
        tok = f"{r['output_tok_s']:12.1f}" if "output_tok_s" in r else f"{'-':>12}"
        ttft = f"{r['ttft_ms']:8.1f}" if "ttft_ms" in r else f"{'-':>8}"
        itl = f"{r['itl_ms']:7.2f}" if "itl_ms" in r else f"{'-':>7}"
        label = r["workload"] if r["workload"] != "latency" else (
            f"{r.get('isl', a.latency_isl)}/{r.get('osl', a.latency_osl)}@1")
        print(f"{label:<12} {str(r.get('batch', '-')):>5} {len(r.get('runs', [])):>7} {tok} "
              f"{ttft} {itl} {r.get('wall_seconds', 0):7.1f}  {note}")
    print(f"total {time.perf_counter() - _T0:.1f} s")
    save()


if __name__ == "__main__":
    main()
