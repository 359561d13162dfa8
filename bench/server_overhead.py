#!/usr/bin/env python3
"""The server's own cost under load (issue 6, "Performance").

N concurrent streaming /v1/completions requests (default 256; 128-token prompts, 64 new tokens,
`ignore_eos`) against a running `kiln serve`, while:
  - a sampler reads kiln:generation_tokens_total from /metrics every --sample-interval seconds and,
    at the same moments, the number of tokens the clients have received;
  - a separate process GETs /health every --health-interval-ms over a keep-alive connection.
Reported: tokens/s the engine produced and tokens/s the clients saw over the same steady-state
window (every request decoding: from the last first token to the first finish), their relative
difference (aim < 2 %), and /health p50/p99/max latency (aim p99 < 5 ms).

Standard library only (no pip packages), so it runs on a bare machine:
    bench/server_overhead.py --url http://127.0.0.1:8000
    bench/server_overhead.py --model "$(scripts/fetch-default-model)" [--server-arg=--threads=2]
A client token is one SSE chunk carrying a choice; at the end the chunk counts are checked against
each stream's usage.completion_tokens (they must match, else the figure says so).
"""

import argparse
import asyncio
import datetime
import json
import multiprocessing
import os
import pathlib
import platform
import random
import statistics
import subprocess
import sys
import time
import http.client
import urllib.parse

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "server"))
import kiln_server  # noqa: E402


class Counters:
    def __init__(self):
        self.chunks = 0


async def stream_one(host, port, body: bytes, counters: Counters, record: dict):
    """One streaming request over raw asyncio sockets (HTTP/1.1, chunked or close-delimited)."""
    reader, writer = await asyncio.open_connection(host, port, limit=1 << 20)
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\nConnection: close\r\n\r\n" % (host.encode(), port, len(body))
                 + body)
    await writer.drain()
    record["t_sent"] = time.monotonic()
    head = await reader.readuntil(b"\r\n\r\n")
    record["status"] = int(head[9:12])
    chunked = b"transfer-encoding: chunked" in head.lower()
    buffer = b""
    done = False

    def feed(data):
        nonlocal buffer, done
        buffer += data
        while b"\n\n" in buffer:
            event, buffer = buffer.split(b"\n\n", 1)
            payload = event.partition(b"data: ")[2]
            if payload == b"[DONE]":
                done = True
                continue
            if not payload:
                continue
            obj = json.loads(payload)
            if obj.get("choices"):
                counters.chunks += 1
                record["chunks"] = record.get("chunks", 0) + 1
                record.setdefault("t_first", time.monotonic())
                reason = obj["choices"][0].get("finish_reason")
                if reason:
                    record["finish_reason"] = reason
            if obj.get("usage"):
                record["completion_tokens"] = obj["usage"]["completion_tokens"]

    while True:
        if chunked:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            if size == 0:
                break
            data = await reader.readexactly(size + 2)
            feed(data[:-2])
        else:
            data = await reader.read(65536)
            if not data:
                break
            feed(data)
    record["t_done"] = time.monotonic()
    record["done"] = done
    writer.close()


def health_prober(host, port, interval_s, stop, out):
    """Runs in its own process: GET /health on one keep-alive connection every interval_s."""
    conn = http.client.HTTPConnection(host, port, timeout=10)
    latencies, errors = [], 0
    while not stop.is_set():
        t = time.perf_counter()
        try:
            conn.request("GET", "/health")
            response = conn.getresponse()
            response.read()
            if response.status == 200:
                latencies.append(time.perf_counter() - t)
            else:
                errors += 1
        except (OSError, http.client.HTTPException):
            errors += 1
            conn.close()
            conn = http.client.HTTPConnection(host, port, timeout=10)
        time.sleep(max(0.0, interval_s - (time.perf_counter() - t)))
    out.put((latencies, errors))


def build_prompts(url, n, num_tokens, seed):
    """n distinct prompts of exactly num_tokens token ids (distinct so prefix caching does not
    skip their prefill)."""
    rng = random.Random(seed)
    words = ["river", "stone", "light", "market", "engine", "paper", "window", "garden", "signal",
             "harbor", "winter", "copper", "violet", "thunder", "meadow", "lantern"]
    prompts = []
    for i in range(n):
        text = f"Request {i}. " + " ".join(rng.choice(words) for _ in range(num_tokens * 2))
        body = json.dumps({"prompt": text, "add_special_tokens": False}).encode()
        parsed = urllib.parse.urlparse(url)
        conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=30)
        conn.request("POST", "/tokenize", body, {"Content-Type": "application/json"})
        tokens = json.loads(conn.getresponse().read())["tokens"]
        conn.close()
        if len(tokens) < num_tokens:
            raise RuntimeError(f"prompt {i} has only {len(tokens)} tokens")
        prompts.append(tokens[:num_tokens])
    return prompts


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))] if values else None


async def run(args, url, model_name):
    parsed = urllib.parse.urlparse(url)
    host, port = parsed.hostname, parsed.port
    prompts = build_prompts(url, args.concurrency, args.prompt_tokens, args.seed)
    counters = Counters()
    records = [{} for _ in prompts]
    samples = []  # (t, engine generation_tokens_total, client chunks)
    loop = asyncio.get_running_loop()
    finished = asyncio.Event()

    async def sampler():
        while not finished.is_set():
            before = counters.chunks
            t0 = time.monotonic()
            m = await loop.run_in_executor(None, kiln_server.metrics, url)
            t1 = time.monotonic()
            samples.append(((t0 + t1) / 2, m["kiln:generation_tokens_total"],
                            (before + counters.chunks) / 2))
            try:
                await asyncio.wait_for(finished.wait(), args.sample_interval)
            except asyncio.TimeoutError:
                pass

    stop = multiprocessing.Event()
    out = multiprocessing.Queue()
    prober = multiprocessing.Process(target=health_prober,
                                     args=(host, port, args.health_interval_ms / 1000, stop, out))
    prober.start()
    sampler_task = asyncio.create_task(sampler())
    started = time.monotonic()
    bodies = [json.dumps({"model": model_name, "prompt": p, "max_tokens": args.max_tokens,
                          "ignore_eos": True, "temperature": 0, "stream": True,
                          "stream_options": {"include_usage": True}}).encode() for p in prompts]
    await asyncio.gather(*(stream_one(host, port, b, counters, r) for b, r in zip(bodies, records)))
    wall = time.monotonic() - started
    finished.set()
    await sampler_task
    stop.set()
    latencies, health_errors = out.get(timeout=60)
    prober.join()
    return records, samples, latencies, health_errors, wall


def summarize(args, records, samples, latencies, health_errors, wall):
    ok = [r for r in records if r.get("status") == 200 and r.get("done")]
    window_start = max(r["t_first"] for r in ok)
    window_end = min(r["t_done"] for r in ok)
    window = [s for s in samples if window_start <= s[0] <= window_end]
    steady = len(window) >= 2
    if not steady:  # ragged starts: fall back to everything between the first and last sample
        window = samples
    (t0, e0, c0), (t1, e1, c1) = window[0], window[-1]
    engine_rate = (e1 - e0) / (t1 - t0)
    client_rate = (c1 - c0) / (t1 - t0)
    chunks = sum(r.get("chunks", 0) for r in ok)
    usage = sum(r.get("completion_tokens", 0) for r in ok)
    ms = [x * 1000 for x in latencies]
    return {
        "requests": len(records), "completed": len(ok),
        "finish_reasons": sorted({r.get("finish_reason") for r in ok}),
        "prompt_tokens": args.prompt_tokens, "max_tokens": args.max_tokens,
        "wall_s": round(wall, 2),
        "client_chunks": chunks, "usage_completion_tokens": usage,
        "chunks_equal_tokens": chunks == usage,
        "window_s": round(t1 - t0, 2), "window_samples": len(window), "steady_window": steady,
        "engine_tok_s": round(engine_rate, 2), "client_tok_s": round(client_rate, 2),
        "relative_difference_pct": round(100 * (engine_rate - client_rate) / engine_rate, 3),
        "health_probes": len(ms), "health_errors": health_errors,
        "health_p50_ms": round(percentile(ms, 50), 3) if ms else None,
        "health_p99_ms": round(percentile(ms, 99), 3) if ms else None,
        "health_max_ms": round(max(ms), 3) if ms else None,
        "ttft_p50_s": round(statistics.median(r["t_first"] - r["t_sent"] for r in ok), 3),
    }


def machine():
    cpu = ""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=pathlib.Path(__file__).parent).stdout.strip()
    return {"cpus": os.cpu_count(), "cpu": cpu, "platform": platform.platform(), "commit": commit,
            "date": datetime.date.today().isoformat()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--url", help="a running server, e.g. http://127.0.0.1:8000")
    ap.add_argument("--model", help="start `kiln serve MODEL` (KILN_BIN or build/kiln) instead")
    ap.add_argument("--server-arg", action="append", default=[],
                    help="extra `kiln serve` flag with --model (repeatable), e.g. --server-arg=--threads=2")
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--sample-interval", type=float, default=0.25)
    ap.add_argument("--health-interval-ms", type=float, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    if bool(args.url) == bool(args.model):
        ap.error("give exactly one of --url and --model")

    server = None
    if args.model:
        server_args = ["--max-num-seqs", str(args.concurrency),
                       "--max-model-len", str(args.prompt_tokens + args.max_tokens + 16)]
        server_args += [a for arg in args.server_arg for a in arg.split("=", 1)]
        # --device in --server-arg picks the backend; the CPU otherwise.
        cpu = not any(a.startswith("--device") for a in args.server_arg)
        server = kiln_server.KilnServer(args.model, server_args, cpu=cpu).start()
        url = server.url
    else:
        url = args.url.rstrip("/")
    try:
        status, body = kiln_server.http_get(url + "/v1/models")
        if status != 200:
            raise RuntimeError(f"GET /v1/models answered {status}")
        model_name = json.loads(body)["data"][0]["id"]
        records, samples, latencies, health_errors, wall = asyncio.run(run(args, url, model_name))
    finally:
        code = server.stop() if server else 0
    result = summarize(args, records, samples, latencies, health_errors, wall)
    result.update({"concurrency": args.concurrency, "model": model_name,
                   "server": " ".join(server.command()) if server else url,
                   "server_exit_code": code, "machine": machine()})

    print(f"\nkiln serve overhead: {args.concurrency} streams x ({args.prompt_tokens} prompt + "
          f"{args.max_tokens} new tokens), {result['machine']['cpus']} CPUs "
          f"({result['machine']['cpu']}) shared by server and clients")
    rows = [("requests completed", f"{result['completed']} / {result['requests']}", ""),
            ("wall time", f"{result['wall_s']} s", ""),
            ("steady window", f"{result['window_s']} s, {result['window_samples']} samples"
             + ("" if result["steady_window"] else " (not steady: whole run)"), ""),
            ("engine tokens/s (/metrics)", f"{result['engine_tok_s']}", ""),
            ("client tokens/s (SSE chunks)", f"{result['client_tok_s']}", ""),
            ("relative difference", f"{result['relative_difference_pct']} %", "aim < 2 %"),
            ("chunks == usage tokens", f"{result['chunks_equal_tokens']} "
             f"({result['client_chunks']} / {result['usage_completion_tokens']})", ""),
            ("/health p50 / p99 / max", f"{result['health_p50_ms']} / {result['health_p99_ms']} / "
             f"{result['health_max_ms']} ms ({result['health_probes']} probes, "
             f"{result['health_errors']} errors)", "aim p99 < 5 ms"),
            ("TTFT p50", f"{result['ttft_p50_s']} s", "")]
    width = max(len(r[0]) for r in rows)
    for name, value, aim in rows:
        print(f"  {name:<{width}}  {value:<48} {aim}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["completed"] == result["requests"] else 1


if __name__ == "__main__":
    sys.exit(main())
