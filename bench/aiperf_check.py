#!/usr/bin/env python3
"""Cross-checks `kiln bench serve` against an independent client, NVIDIA's aiperf.

Starts `kiln serve` on a model, then, for each --concurrency, runs the same workload through
`kiln bench serve` and through `aiperf profile`, alternating them (kiln, aiperf, kiln, aiperf with
--rounds 2) so that a drift of the machine shows up as a spread within each tool rather than as a
difference between them. Compares the medians and fails (exit 1) when one differs by more than
--tolerance (5 %, the issue's figure). Standard library only; aiperf lives in its own virtual
environment:

    python3 -m venv /tmp/aiperf-venv && /tmp/aiperf-venv/bin/pip install aiperf
    build/kiln synth --preset smollm2-135m --out /tmp/smol-synth      # has tokenizer.json
    bench/aiperf_check.py --kiln build/kiln --model /tmp/smol-synth \\
        --aiperf /tmp/aiperf-venv/bin/aiperf --isl 128 --osl 32 --concurrency 1,4 \\
        --num-requests 48 --port 8123 --json /tmp/aiperf_check.json

The workload: streaming /v1/completions, --isl prompt tokens, --osl output tokens (ignore_eos,
temperature 0, so every request generates exactly --osl), --num-requests requests with at most
--concurrency in flight and no pacing (kiln: --request-rate inf --max-concurrency C; aiperf:
--concurrency C, which keeps C in flight). Each round uses seed --seed + round, so no prompt is
sent twice; the server runs with --no-prefix-caching by default (--server-args) so that nothing
is served from cache either way. Before the first round --warmup requests (default: one per
concurrency slot) are sent and not measured; neither tool adds a warm-up of its own.

Metric definitions (verified in the source of aiperf 0.13.0, aiperf/metrics/types/*.py, and in
kiln's src/benchmark/metrics.h), all medians over the measured requests:

  kiln TTFT  (ttft.p50)   send -> first chunk with non-empty text
  aiperf TTFT (time_to_first_token.p50)   request start -> first response whose text is
             non-empty (`content_responses[0]`): the same definition.
  kiln TPOT  (tpot.p50)   per request (E2E - TTFT) / (output tokens - 1), E2E to the last byte
  aiperf ITL (inter_token_latency.p50)   per request (request_latency - TTFT) / (OSL - 1), where
             request_latency ends at the last non-empty chunk and OSL is the server's
             usage.completion_tokens (--use-server-token-count; without it aiperf re-tokenizes
             the output text, which need not give back --osl tokens). This is vLLM's TPOT, not
             vLLM's ITL: it is compared with kiln's TPOT. (kiln's E2E also covers the usage chunk
             and [DONE] after the last text, a few microseconds.)
  kiln ITL   (itl.p50)    gaps between successive chunks with text, pooled over all requests
  aiperf ICL (inter_chunk_latency.p50)   the same pooled gaps: compared with kiln's ITL.
Both tools take percentiles by linear interpolation between closest ranks (numpy's default).

Prompt lengths. kiln's random dataset sends --isl token ids, which the server takes as they are
(no BOS is added to a token-id prompt). aiperf sends text: aiperf 0.13 treats --isl as the total
the server will see, so it generates text that re-encodes to --isl minus
tokenizer.num_special_tokens_to_add() tokens (127 for --isl 128 with a BOS-adding tokenizer),
and the server's tokenizer adds the BOS back: 128. This script checks it rather than trusting it,
twice: from the clients' view (kiln's total_input_tokens / num_completed; aiperf's
usage_prompt_tokens, the server's usage.prompt_tokens of each request, min and max) and from the
server's own counters (kiln:prompt_tokens_total and kiln:generation_tokens_total per finished
request, read from /metrics before and after each run, with no preemption in between). A run
whose prompt or output lengths are off fails the check.

aiperf offline: --tokenizer must be a local HF tokenizer directory (tokenizer.json,
tokenizer_config.json). aiperf 0.13.0 loads a local path directly with AutoTokenizer and needs no
network; but with HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE set it sends even a local path through
huggingface_hub.snapshot_download and fails ("Repo id must be in the form ..."), so this script
removes those two variables from aiperf's environment.

What can make the two disagree without either measuring wrongly (both seen on a 2-vCPU CPU VM):
  - Client CPU. aiperf is eight Python processes (ZMQ between them), and in --concurrency mode
    without a request rate its timing_manager busy-waits for a free slot for the whole run
    (aiperf/timing/strategies/request_rate.py, execute_phase: try_issue_credit -> None ->
    yield_to_event_loop(), again): one CPU at 100 %, ~1 CPU-second per second of run, against
    ~0.01 for `kiln bench serve`. Where the client and the server share CPUs the server runs
    slower under aiperf, and aiperf's latencies are higher for that reason alone. The table shows
    each run's CPU seconds (server, client, anything else on the machine) and the output tok/s the
    server reached under each client; a run during which other processes used more than
    --max-other-cpu of a CPU (another build, say) fails as "not quiet". On a small machine pin
    them apart: --server-cpus 0 --client-cpus 1 (sched_setaffinity; on the 2-vCPU development VM
    this brought the server's speed under the two clients within 1 %, from 6 % apart). On the GPU
    machine (16 cores) it does not matter.
  - Arrival alignment at concurrency > 1. With ignore_eos and equal lengths, requests finish in
    groups, and their replacements arrive together. `kiln bench serve` sends them within
    microseconds, so the server prefills them in one step; aiperf issues the first replacement a
    few ms ahead of the rest (its credits go through its timing service), so the server often
    prefills that one alone and the others in the next step. Both clients measure what happened
    correctly, but the TTFT distributions differ (here, with 1.3 s prefill steps on a CPU: the
    median by 30 %). The effect shrinks with short steps (a GPU) and vanishes at concurrency 1,
    which is the clean check of the measurement itself; hence the default --concurrency 1,4.

Output: a table of runs and a comparison table per concurrency on stdout; --json writes every
figure (per run: both tools' distributions, the server's counters, CPU use, the commands; per
concurrency: the comparison); exit status 0 PASS, 1 FAIL (a gated median off by more than the
tolerance while both tools' rounds agree among themselves, or a run with wrong lengths, failed
requests or a busy machine), 3 INCONCLUSIVE (off by more than the tolerance, but one tool's own
rounds differ by more than that too: the machine drifted), 2 error. The server is stopped in every
case, by SIGTERM.
"""

import argparse
import datetime
import json
import os
import pathlib
import platform
import re
import resource
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

# (label, kiln summary key, aiperf metric tag, what is compared)
COMPARED = [
    ("TTFT", "ttft", "time_to_first_token", "kiln ttft.p50 vs aiperf time_to_first_token.p50"),
    ("TPOT", "tpot", "inter_token_latency",
     "kiln tpot.p50 vs aiperf inter_token_latency.p50 (per request (E2E-TTFT)/(OSL-1))"),
    ("ITL", "itl", "inter_chunk_latency",
     "kiln itl.p50 vs aiperf inter_chunk_latency.p50 (pooled gaps between chunks)"),
]


class CheckError(Exception):
    pass


def log(msg):
    print(f"[aiperf_check {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


_TICK = os.sysconf("SC_CLK_TCK")


def busy_cpu_seconds():
    """CPU seconds the whole machine spent busy (all CPUs, /proc/stat), or None."""
    try:
        fields = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / _TICK  # user nice system idle iowait irq softirq steal


def process_cpu_seconds(pid):
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICK  # utime + stime
    except (OSError, ValueError, IndexError):
        return None


def children_cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


class CpuMeter:
    """Where the CPU time of one client run went: the server, the client (all its processes),
    and everything else on the machine (another build, say), which makes the figures noisy."""

    def __init__(self, server_pid):
        self.pid = server_pid
        self.t = time.monotonic()
        self.busy, self.srv = busy_cpu_seconds(), process_cpu_seconds(server_pid)
        self.cli = children_cpu_seconds()
        self.load = os.getloadavg()[0]

    def done(self):
        wall = time.monotonic() - self.t
        busy, srv = busy_cpu_seconds(), process_cpu_seconds(self.pid)
        cli = children_cpu_seconds() - self.cli
        out = {"wall_s": wall, "client_cpu_s": cli, "loadavg_1m_before": self.load,
               "loadavg_1m_after": os.getloadavg()[0]}
        if srv is not None and self.srv is not None:
            out["server_cpu_s"] = srv - self.srv
        if busy is not None and self.busy is not None and "server_cpu_s" in out:
            out["other_cpu_s"] = max(0.0, (busy - self.busy) - out["server_cpu_s"] - cli)
            out["other_cpu_share"] = out["other_cpu_s"] / wall if wall > 0 else 0.0
        return out


def parse_cpus(spec):
    """'0' / '1-3' / '0,2' -> set of ints; '' -> None."""
    if not spec:
        return None
    cpus = set()
    for part in spec.split(","):
        if "-" in part:
            lo, hi = part.split("-")
            cpus.update(range(int(lo), int(hi) + 1))
        else:
            cpus.add(int(part))
    return cpus


def pinned(cpus):
    if not cpus:
        return None
    return lambda: os.sched_setaffinity(0, cpus)


def http(method, url, body=None, timeout=30.0):
    """(status, bytes); status None when nothing answered."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return None, b""


def server_metrics(base):
    """kiln's /metrics: {name: value summed over label sets}."""
    status, body = http("GET", base + "/metrics")
    if status != 200:
        raise CheckError(f"GET {base}/metrics answered {status}")
    out = {}
    for line in body.decode().splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(3))
    return out


def server_delta(before, after):
    d = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in (
        "kiln:prompt_tokens_total", "kiln:generation_tokens_total", "kiln:request_success_total",
        "kiln:num_preemptions_total")}
    n = d["kiln:request_success_total"]
    return {
        "requests_finished": int(n),
        "prompt_tokens": int(d["kiln:prompt_tokens_total"]),
        "generation_tokens": int(d["kiln:generation_tokens_total"]),
        "preemptions": int(d["kiln:num_preemptions_total"]),
        "prompt_tokens_per_request": d["kiln:prompt_tokens_total"] / n if n else None,
        "generation_tokens_per_request": d["kiln:generation_tokens_total"] / n if n else None,
    }


class Server:
    def __init__(self, a, workdir):
        self.base = f"http://127.0.0.1:{a.port}"
        self.cmd = [a.kiln, "serve", a.model, "--host", "127.0.0.1", "--port", str(a.port)]
        self.cmd += shlex.split(a.server_args)
        self.log_path = workdir / "kiln-serve.log"
        self.cpus = parse_cpus(a.server_cpus)
        self.proc = None

    def tail(self, n=30):
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def start(self, timeout):
        if http("GET", self.base + "/health", timeout=2)[0] is not None:
            raise CheckError(f"something already answers on {self.base}: pick another --port")
        log("starting: " + shlex.join(self.cmd))
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, preexec_fn=pinned(self.cpus))
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise CheckError(f"kiln serve exited with {self.proc.returncode} before it was "
                                 f"ready:\n{self.tail()}")
            if http("GET", self.base + "/health", timeout=2)[0] == 200:
                return
            if time.monotonic() > deadline:
                raise CheckError(f"kiln serve not ready (GET /health 200) in {timeout} s:\n"
                                 f"{self.tail()}")
            time.sleep(0.1)

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        log("stopping kiln serve (SIGTERM)")
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            log("kiln serve did not exit within 60 s of SIGTERM: killing it")
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def run_logged(cmd, log_path, cpus, timeout, env=None):
    log("running: " + shlex.join(cmd))
    t = time.monotonic()
    with open(log_path, "wb") as f:
        try:
            p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               preexec_fn=pinned(cpus), timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            raise CheckError(f"{cmd[0]} ran past {timeout} s (log: {log_path})")
    wall = time.monotonic() - t
    if p.returncode != 0:
        tail = "\n".join(pathlib.Path(log_path).read_text(errors="replace").splitlines()[-30:])
        raise CheckError(f"{shlex.join(cmd[:3])} ... exited with {p.returncode}:\n{tail}")
    return wall


def warmup(base, model, a, vocab_hint=1000):
    """--warmup unmeasured requests, the highest concurrency at a time (non-streaming)."""
    if a.warmup <= 0:
        return
    log(f"warm-up: {a.warmup} requests")
    errors = []

    def one(i):
        prompt = [(17 + 31 * i + 7 * j) % vocab_hint + 4 for j in range(a.isl)]
        st, body = http("POST", base + "/v1/completions", {
            "model": model, "prompt": prompt, "max_tokens": a.osl, "ignore_eos": True,
            "temperature": 0}, timeout=a.run_timeout)
        if st != 200:
            errors.append(f"{st}: {body[:200]!r}")

    width = max(a.concurrency)
    for start in range(0, a.warmup, width):
        threads = [threading.Thread(target=one, args=(i,))
                   for i in range(start, min(a.warmup, start + width))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    if errors:
        raise CheckError(f"warm-up request failed: {errors[0]}")


def kiln_command(a, c, base, model, seed, out_json):
    return [a.kiln, "bench", "serve", "--base-url", base, "--model", model,
            "--endpoint", "completions", "--tokenizer", a.tokenizer, "--dataset", "random",
            "--input-len", str(a.isl), "--output-len", str(a.osl),
            "--num-requests", str(a.num_requests), "--max-concurrency", str(c),
            "--request-rate", "inf", "--ignore-eos", "--seed", str(seed), "--no-progress",
            "--json", str(out_json)]


def aiperf_command(a, c, base, model, seed, artifact_dir):
    return [a.aiperf, "profile", "--model", model, "--url", base,
            "--endpoint-type", "completions", "--streaming", "--tokenizer", a.tokenizer,
            "--isl", str(a.isl), "--isl-stddev", "0", "--osl", str(a.osl), "--osl-stddev", "0",
            "--concurrency", str(c), "--request-count", str(a.num_requests),
            "--num-dataset-entries", str(a.num_requests), "--random-seed", str(seed),
            "--extra-inputs", "ignore_eos:true", "--extra-inputs", "temperature:0",
            "--use-server-token-count", "--ui", "none", "--no-gpu-telemetry",
            "--no-server-metrics", "--artifact-dir", str(artifact_dir)]


def parse_kiln(path, c):
    """kiln bench serve --json -> {ttft, tpot, itl: p50 ms, ...} (schema: the brief / metrics.h)."""
    doc = json.loads(pathlib.Path(path).read_text())
    runs = doc.get("runs") or []
    if not runs:
        raise CheckError(f"{path}: no runs")
    run = next((r for r in runs if r.get("max_concurrency") == c), runs[0])
    s = run["summary"]
    out = {"p50": {}, "mean": {}, "stats": {}}
    for label, key, _, _ in COMPARED:
        d = s[key]
        out["p50"][label] = float(d["p50"])
        out["mean"][label] = float(d["mean"])
        out["stats"][label] = d
    out["num_completed"] = int(s.get("num_completed", 0))
    out["num_failed"] = int(s.get("num_failed", 0))
    out["output_throughput"] = s.get("output_throughput")
    out["total_output_tokens"] = s.get("total_output_tokens")
    out["total_input_tokens"] = s.get("total_input_tokens")
    n = out["num_completed"]
    out["input_tokens_per_request"] = (out["total_input_tokens"] / n
                                       if n and out["total_input_tokens"] is not None else None)
    out["output_tokens_per_request"] = (out["total_output_tokens"] / n
                                        if n and out["total_output_tokens"] is not None else None)
    return out


def parse_aiperf(artifact_dir):
    """aiperf's profile_export_aiperf.json -> the same shape as parse_kiln."""
    path = pathlib.Path(artifact_dir) / "profile_export_aiperf.json"
    if not path.exists():
        found = list(pathlib.Path(artifact_dir).rglob("profile_export_aiperf.json"))
        if not found:
            raise CheckError(f"no profile_export_aiperf.json under {artifact_dir}")
        path = found[0]
    doc = json.loads(path.read_text())
    out = {"p50": {}, "mean": {}, "stats": {}, "export": str(path),
           "aiperf_version": doc.get("aiperf_version")}
    for label, _, tag, _ in COMPARED:
        m = doc.get(tag)
        if not m:
            raise CheckError(f"{path}: no metric {tag}")
        if m.get("unit") != "ms":
            raise CheckError(f"{path}: {tag} is in {m.get('unit')}, expected ms")
        out["p50"][label] = float(m["p50"])
        out["mean"][label] = float(m["avg"])
        out["stats"][label] = {k: m.get(k) for k in ("count", "avg", "std", "min", "p50", "p90",
                                                     "p99", "max")}

    def val(tag, key="avg"):
        m = doc.get(tag)
        return m.get(key) if m else None

    errors = sum(int(e.get("count", 0)) for e in (doc.get("error_summary") or []))
    out["num_completed"] = int(val("request_count") or 0)
    out["num_failed"] = errors
    out["output_throughput"] = val("output_token_throughput")
    out["total_output_tokens"] = val("total_output_tokens")
    out["input_tokens_per_request"] = val("usage_prompt_tokens")
    out["input_tokens_min_max"] = [val("usage_prompt_tokens", "min"),
                                   val("usage_prompt_tokens", "max")]
    out["output_tokens_per_request"] = val("output_sequence_length")
    out["output_tokens_min_max"] = [val("output_sequence_length", "min"),
                                    val("output_sequence_length", "max")]
    return out


def check_lengths(tool, r, srv, a):
    """Problems with what the server really got (empty list = fine)."""
    problems = []
    if r["num_failed"] or r["num_completed"] != a.num_requests:
        problems.append(f"{tool}: {r['num_completed']} completed, {r['num_failed']} failed "
                        f"(expected {a.num_requests} completed)")
    if srv["requests_finished"] != a.num_requests:
        problems.append(f"{tool}: the server finished {srv['requests_finished']} requests, "
                        f"expected {a.num_requests}")
    if srv["preemptions"] == 0:
        if srv["prompt_tokens_per_request"] != a.isl:
            problems.append(f"{tool}: the server computed {srv['prompt_tokens_per_request']} "
                            f"prompt tokens per request, expected {a.isl}")
    else:
        problems.append(f"{tool}: {srv['preemptions']} preemptions (prompt-token counter "
                        f"includes recomputation; give the server more KV cache)")
    if srv["generation_tokens_per_request"] != a.osl:
        problems.append(f"{tool}: the server generated {srv['generation_tokens_per_request']} "
                        f"tokens per request, expected {a.osl}")
    ipr, opr = r.get("input_tokens_per_request"), r.get("output_tokens_per_request")
    if ipr is not None and ipr != a.isl:
        problems.append(f"{tool}: client reports {ipr} input tokens per request, expected {a.isl}")
    if opr is not None and opr != a.osl:
        problems.append(f"{tool}: client reports {opr} output tokens per request, "
                        f"expected {a.osl}")
    for key, want in (("input_tokens_min_max", a.isl), ("output_tokens_min_max", a.osl)):
        mm = r.get(key)
        if mm and any(v is not None and v != want for v in mm):
            problems.append(f"{tool}: {key} {mm}, expected {want}")
    return problems


def fmt_ms(v):
    return "-" if v is None else f"{v:9.2f}"


def measure(a, c, rnd, seed, tool, server, model_name, workdir, client_cpus, aiperf_env):
    """One client run at concurrency c: its parsed figures, the server's counters, CPU use."""
    before = server_metrics(server.base)
    meter = CpuMeter(server.proc.pid)
    stem = f"c{c}-round{rnd}-{tool}"
    if tool == "kiln":
        out = workdir / f"{stem}.json"
        cmd = kiln_command(a, c, server.base, model_name, seed, out)
        wall = run_logged(cmd, workdir / f"{stem}.log", client_cpus, a.run_timeout)
        r = parse_kiln(out, c)
    else:
        out = workdir / stem
        cmd = aiperf_command(a, c, server.base, model_name, seed, out)
        wall = run_logged(cmd, workdir / f"{stem}.log", client_cpus, a.run_timeout,
                          env=aiperf_env)
        r = parse_aiperf(out)
    cpu = meter.done()
    srv = server_delta(before, server_metrics(server.base))
    problems = check_lengths(f"{tool} c{c} round {rnd}", r, srv, a)
    if cpu.get("other_cpu_share", 0.0) > a.max_other_cpu:
        problems.append(
            f"{tool} c{c} round {rnd}: other processes used {cpu['other_cpu_share']:.0%} of a "
            f"CPU during the run (load average {cpu['loadavg_1m_after']:.2f}): the machine was "
            f"not quiet, run again")
    log(f"c{c} round {rnd} {tool}: " + ", ".join(f"{k} p50 {v:.2f} ms" for k, v in
                                                  r["p50"].items())
        + f"; server saw {srv['prompt_tokens_per_request']} prompt / "
        f"{srv['generation_tokens_per_request']} output tokens per request"
        + ("" if not problems else "; PROBLEMS: " + "; ".join(problems)))
    return {"concurrency": c, "round": rnd, "tool": tool, "seed": seed,
            "command": shlex.join(cmd), "wall_s": wall, "cpu": cpu, "server": srv,
            "problems": problems, **r}


def compare(a, runs, gate):
    """Per tool, the mean of its rounds' medians; diff = kiln / aiperf - 1; spread = (max - min)
    / mean of a tool's rounds (the drift the alternation exposes)."""
    out = {"metrics": {}, "pass": True, "fail": False}
    for label, _, _, what in COMPARED:
        per = {t: [x["p50"][label] for x in runs if x["tool"] == t] for t in ("kiln", "aiperf")}
        k, ap = statistics.fmean(per["kiln"]), statistics.fmean(per["aiperf"])
        rel = (k - ap) / ap if ap else float("inf")
        spread = {t: (max(v) - min(v)) / statistics.fmean(v) if statistics.fmean(v) else 0.0
                  for t, v in per.items()}
        # Round r of kiln and round r of aiperf ran back to back: their ratio is the least
        # affected by a slow drift of the machine.
        paired = [kr / ar - 1 for kr, ar in zip(per["kiln"], per["aiperf"]) if ar]
        ok = abs(rel) <= a.tolerance
        drift = max(spread.values()) > a.tolerance
        verdict = "PASS" if ok else "DRIFT" if drift else "FAIL"
        gated = label in gate
        if gated and verdict != "PASS":
            out["pass"] = False
            if verdict == "FAIL":
                out["fail"] = True
        out["metrics"][label] = {"kiln_p50_ms": k, "aiperf_p50_ms": ap, "rel_diff": rel,
                                 "paired_rel_diffs": paired,
                                 "kiln_rounds": per["kiln"], "aiperf_rounds": per["aiperf"],
                                 "spread": spread, "pass": ok, "verdict": verdict,
                                 "gated": gated, "compares": what}
    thr = {t: statistics.fmean(x["output_throughput"] or 0 for x in runs if x["tool"] == t)
           for t in ("kiln", "aiperf")}
    out["output_throughput"] = thr
    return out


def print_tables(a, result, model_name):
    print()
    print(f"kiln bench serve vs aiperf {result.get('aiperf_version', '?')}: ISL {a.isl}, OSL "
          f"{a.osl}, {a.num_requests} requests per run, {a.rounds} rounds each, model "
          f"{model_name}")
    print(f"{'conc':>4} {'round':>5} {'tool':<7} {'TTFT p50':>9} {'TPOT p50':>9} {'ITL p50':>9} "
          f"{'out tok/s':>9} {'in/req':>7} {'out/req':>7} {'srv in/req':>10} {'wall s':>7} "
          f"{'srv cpu':>7} {'cli cpu':>7} {'other':>6}")
    for x in result["runs"]:
        srv = x["server"]
        thr = x.get("output_throughput")
        print(f"{x['concurrency']:>4} {x['round']:>5} {x['tool']:<7} {fmt_ms(x['p50']['TTFT'])} "
              f"{fmt_ms(x['p50']['TPOT'])} {fmt_ms(x['p50']['ITL'])} "
              f"{'-' if thr is None else f'{thr:9.2f}'} "
              f"{str(x.get('input_tokens_per_request')):>7} "
              f"{str(x.get('output_tokens_per_request')):>7} "
              f"{str(srv['prompt_tokens_per_request']):>10} {x['wall_s']:7.1f} "
              f"{x['cpu'].get('server_cpu_s', float('nan')):7.1f} "
              f"{x['cpu']['client_cpu_s']:7.1f} "
              f"{x['cpu'].get('other_cpu_share', float('nan')):6.0%}")
    print()
    print(f"{'conc':>4} {'median (ms)':<11} {'kiln':>9} {'aiperf':>9} {'diff':>8} "
          f"{'kiln spread':>11} {'aiperf spread':>13}  verdict (|diff| <= {a.tolerance:.0%})")
    for c, comp in result["comparisons"].items():
        for label, m in comp["metrics"].items():
            mark = m["verdict"] + ("" if m["gated"] else " (not gated)")
            print(f"{c:>4} {label:<11} {m['kiln_p50_ms']:9.2f} {m['aiperf_p50_ms']:9.2f} "
                  f"{m['rel_diff']:+8.2%} {m['spread']['kiln']:11.2%} "
                  f"{m['spread']['aiperf']:13.2%}  {mark}")
        thr = comp["output_throughput"]
        rel = thr["kiln"] / thr["aiperf"] - 1 if thr["aiperf"] else float("nan")
        print(f"{c:>4} {'out tok/s':<11} {thr['kiln']:9.2f} {thr['aiperf']:9.2f} {rel:+8.2%}"
              f"{'':>26}  (server speed under each client; not gated)")
    print("  TTFT: both send -> first chunk with text. TPOT: kiln tpot vs aiperf "
          "inter_token_latency, per request (E2E-TTFT)/(OSL-1).")
    print("  ITL: kiln itl vs aiperf inter_chunk_latency, gaps between chunks pooled over "
          "requests. diff = kiln/aiperf - 1 of the means of the rounds' medians; spread = "
          "(max-min)/mean over a tool's rounds.")
    print("  srv cpu / cli cpu: CPU seconds of the server / of the client's processes "
          "(startup included) per run; other: CPU share used by anything else meanwhile.")
    print("  DRIFT: the medians differ by more than the tolerance, but so do one tool's own "
          "rounds: the machine drifted, the check is inconclusive (more --rounds, a quieter "
          "machine).")
    for pr in result["problems"]:
        print("  PROBLEM: " + pr)
    print(result["status"])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kiln", default="build/kiln", help="the kiln binary (serve and bench serve)")
    p.add_argument("--model", required=True, help="checkpoint directory (or .gguf) to serve")
    p.add_argument("--tokenizer", help="local HF tokenizer directory for both clients "
                   "(default: --model)")
    p.add_argument("--aiperf", default="aiperf", help="the aiperf executable")
    p.add_argument("--isl", type=int, default=128)
    p.add_argument("--osl", type=int, default=32)
    p.add_argument("--concurrency", default="1,4",
                   help="requests in flight; a comma list checks each in turn (default 1,4)")
    p.add_argument("--num-requests", type=int, default=48)
    p.add_argument("--port", type=int, default=8123)
    p.add_argument("--seed", type=int, default=0, help="round r uses seed + r (both tools)")
    p.add_argument("--rounds", type=int, default=2, help="kiln, aiperf pairs (default 2)")
    p.add_argument("--warmup", type=int, default=None,
                   help="unmeasured requests before the first round (default: the highest "
                        "concurrency)")
    p.add_argument("--tolerance", type=float, default=0.05, help="relative (default 0.05)")
    p.add_argument("--gate", default="TTFT,TPOT,ITL",
                   help="medians that must agree (TTFT, TPOT, ITL; default all three)")
    p.add_argument("--server-args", default="--threads 1 --no-prefix-caching",
                   help="more `kiln serve` flags (default: %(default)s)")
    p.add_argument("--server-cpus", default="", help="pin the server to these CPUs, e.g. 0")
    p.add_argument("--client-cpus", default="", help="pin both clients to these CPUs, e.g. 1")
    p.add_argument("--max-other-cpu", type=float, default=0.15,
                   help="fail a run during which processes other than the server and the client "
                        "used more than this share of one CPU (default 0.15)")
    p.add_argument("--run-timeout", type=float, default=1800, help="seconds per client run")
    p.add_argument("--server-timeout", type=float, default=600, help="seconds to become ready")
    p.add_argument("--workdir", help="where client outputs go (default: a new temporary dir)")
    p.add_argument("--json", help="write the results here")
    a = p.parse_args()
    a.tokenizer = a.tokenizer or a.model
    try:
        a.concurrency = [int(x) for x in a.concurrency.split(",") if x.strip()]
    except ValueError:
        p.error(f"--concurrency: expected integers, got {a.concurrency}")
    if not a.concurrency or min(a.concurrency) < 1:
        p.error("--concurrency: expected integers >= 1")
    a.warmup = max(a.concurrency) if a.warmup is None else a.warmup
    gate = [g.strip().upper() for g in a.gate.split(",") if g.strip()]
    if any(g not in {c[0] for c in COMPARED} for g in gate):
        p.error(f"--gate: expected a subset of TTFT,TPOT,ITL, got {a.gate}")
    if not (pathlib.Path(a.tokenizer) / "tokenizer.json").exists():
        p.error(f"--tokenizer {a.tokenizer}: no tokenizer.json there (aiperf needs a local HF "
                "tokenizer directory)")
    workdir = pathlib.Path(a.workdir or tempfile.mkdtemp(prefix="aiperf-check-"))
    workdir.mkdir(parents=True, exist_ok=True)
    client_cpus = parse_cpus(a.client_cpus)
    aiperf_env = {k: v for k, v in os.environ.items()
                  if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    aiperf_env.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    aiperf_env.setdefault("DO_NOT_TRACK", "1")

    result = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "host": platform.node(), "cpus": os.cpu_count(),
        "workload": {"isl": a.isl, "osl": a.osl, "concurrency": a.concurrency,
                     "num_requests": a.num_requests, "endpoint": "completions",
                     "streaming": True, "ignore_eos": True, "temperature": 0,
                     "request_rate": "inf", "warmup": a.warmup},
        "model": a.model, "tokenizer": a.tokenizer, "tolerance": a.tolerance, "gate": gate,
        "server_cpus": a.server_cpus, "client_cpus": a.client_cpus,
        "definitions": {c[0]: c[3] for c in COMPARED},
        "runs": [], "status": "error",
    }

    def save():
        if a.json:
            pathlib.Path(a.json).write_text(json.dumps(result, indent=2) + "\n")

    def on_term(signum, frame):  # stop the server on SIGTERM too (finally below)
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)

    server = Server(a, workdir)
    result["server_command"] = shlex.join(server.cmd)
    exit_code = 2
    try:
        server.start(a.server_timeout)
        st, body = http("GET", server.base + "/v1/models")
        if st != 200:
            raise CheckError(f"GET /v1/models answered {st}")
        model_name = json.loads(body)["data"][0]["id"]
        result["served_model_name"] = model_name
        log(f"serving {model_name!r} on {server.base}; outputs under {workdir}")
        vocab = 1000
        try:
            vocab = int(json.load(open(pathlib.Path(a.model) / "config.json"))["vocab_size"]) - 8
        except (OSError, KeyError, ValueError):
            pass
        warmup(server.base, model_name, a, vocab_hint=vocab)

        verdict, failed = True, False
        result["comparisons"] = {}
        for c in a.concurrency:
            for rnd in range(a.rounds):
                seed = a.seed + rnd
                for tool in ("kiln", "aiperf"):
                    run = measure(a, c, rnd, seed, tool, server, model_name, workdir,
                                  client_cpus, aiperf_env)
                    result["runs"].append(run)
                    if run.get("aiperf_version"):
                        result["aiperf_version"] = run["aiperf_version"]
                    save()
            comparison = compare(a, [x for x in result["runs"] if x["concurrency"] == c], gate)
            result["comparisons"][str(c)] = comparison
            verdict = verdict and comparison["pass"]
            failed = failed or comparison["fail"]
            save()
        problems = [pr for x in result["runs"] for pr in x["problems"]]
        result["problems"] = problems
        if verdict and not problems:
            result["status"] = "PASS"
        elif failed or problems:
            result["status"] = "FAIL"
        else:
            result["status"] = "INCONCLUSIVE"
        exit_code = {"PASS": 0, "FAIL": 1, "INCONCLUSIVE": 3}[result["status"]]
        print_tables(a, result, model_name)
    except CheckError as e:
        log(f"error: {e}")
        result["error"] = str(e)
    except KeyboardInterrupt:
        log("interrupted")
        result["error"] = "interrupted"
    finally:
        server.stop()
        save()
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
