"""Fuzz: ≥ 5,000 schema-derived, mutated and malformed requests against a server on a tiny
synthetic model. Never a 5xx, the process stays up, and no request is left running after.

Run alone with `pytest tests/server -m fuzz`; KILN_FUZZ_SEED picks another seed and
KILN_FUZZ_SCALE multiplies the counts.
"""

import collections
import concurrent.futures
import json
import os
import random
import socket
import time

import httpx
import pytest

import fuzz_inputs
import kiln_server
import openapi
import wire
from conftest import TINY_ARGS

pytestmark = pytest.mark.fuzz

SEED = int(os.environ.get("KILN_FUZZ_SEED", "20261122"))
SCALE = float(os.environ.get("KILN_FUZZ_SCALE", "1"))
NUM_SCHEMA = int(2000 * SCALE)  # per route
NUM_MUTATED = int(1500 * SCALE)
NUM_RAW = int(600 * SCALE)
MODEL = TINY_ARGS[1]

VALID = [
    ("/v1/completions", {"model": MODEL, "prompt": "Hello", "max_tokens": 4}),
    ("/v1/completions", {"model": MODEL, "prompt": ["a", "b"], "max_tokens": 3, "n": 2,
                         "logprobs": 2, "echo": True, "temperature": 0.5, "seed": 1}),
    ("/v1/completions", {"model": MODEL, "prompt": [[1, 2, 3], [4]], "max_tokens": 3,
                         "stream": True, "stream_options": {"include_usage": True},
                         "stop": ["a", "bc"], "logit_bias": {"7": 5}}),
    ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}],
                              "max_tokens": 4}),
    ("/v1/chat/completions", {"model": MODEL, "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
        "max_tokens": 3, "logprobs": True, "top_logprobs": 3, "stream": True, "n": 2,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}),
    ("/tokenize", {"prompt": "Hello"}),
    ("/detokenize", {"tokens": [1, 2, 3]}),
    ("/generate", {"prompt": "Hello", "max_tokens": 3}),
    ("/v2/models/tiny/generate", {"text_input": "Hello", "max_tokens": 3}),
    ("/v2/models/tiny/generate_stream", {"text_input": "Hello", "max_tokens": 3}),
]


@pytest.fixture(scope="module")
def fuzz_server(tiny_model, tmp_path_factory):
    s = kiln_server.KilnServer(tiny_model, TINY_ARGS + ["--max-model-len", "256", "--max-num-seqs", "64"],
                               log_path=tmp_path_factory.mktemp("fuzz") / "server.log").start()
    yield s
    code = s.stop()
    assert code == 0, f"kiln serve exited {code} after SIGTERM\n{s.log_tail()}"


def schema_requests(rng):
    out = []
    for path, schema_name in [("/v1/completions", "CreateCompletionRequest"),
                              ("/v1/chat/completions", "CreateChatCompletionRequest")]:
        schema = openapi.request_schema(schema_name)
        for _ in range(NUM_SCHEMA):
            body = fuzz_inputs.from_schema(schema, rng)
            # Most requests name the served model, so they get past the 404 into validation.
            if isinstance(body, dict) and rng.random() < 0.8:
                body["model"] = MODEL
            out.append((path, json.dumps(body, allow_nan=True).encode("utf-8", "surrogatepass")))
    return out


def mutated_requests(rng):
    return [(path, fuzz_inputs.mutate(base, rng))
            for path, base in (rng.choice(VALID) for _ in range(NUM_MUTATED))]


def send_raw(server, data: bytes):
    """Sends bytes, half-closes, reads the answer; returns the first status code, or None when
    the server closed or timed out without one."""
    with socket.create_connection((server.host, server.port), timeout=10) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except OSError:  # the server may close early on garbage: not a failure
            pass
        received = b""
        try:
            while len(received) < 64:
                part = sock.recv(4096)
                if not part:
                    break
                received += part
        except (socket.timeout, ConnectionResetError):
            pass
    if received.startswith(b"HTTP/1."):
        return int(received[9:12])
    assert not received, f"a reply that is not HTTP: {received[:80]!r} to {data[:120]!r}"
    return None


def test_fuzz(fuzz_server):
    rng = random.Random(SEED)
    requests = schema_requests(rng) + mutated_requests(rng)
    rng.shuffle(requests)
    raw_cases = fuzz_inputs.raw_http_cases(
        rng, NUM_RAW, json.dumps({"model": MODEL, "prompt": "hi", "max_tokens": 2}).encode())
    statuses = collections.Counter()
    failures = []
    started = time.monotonic()

    def send_json(item):
        i, (path, body) = item
        try:
            with client_pool.get() as c:
                r = c.post(path, content=body, headers={"content-type": "application/json"})
        except httpx.HTTPError as e:
            return i, path, body, None, f"transport error {e!r}"
        problem = None
        if r.status_code >= 500:
            problem = f"{r.status_code}: {r.text[:300]}"
        else:
            try:
                wire.check_response(path, r.status_code, r.headers.get("content-type", ""), r.content)
            except Exception as e:  # noqa: BLE001 -- recorded with its request
                problem = f"{r.status_code} with a malformed body: {e}"
        return i, path, body, r.status_code, problem

    class ClientPool:  # one keep-alive client per worker thread
        def __init__(self):
            self.free = [httpx.Client(base_url=fuzz_server.url, timeout=120.0) for _ in range(8)]

        def get(self):
            pool = self

            class Lease:
                def __enter__(self):
                    self.c = pool.free.pop()
                    return self.c

                def __exit__(self, *exc):
                    pool.free.append(self.c)
            return Lease()

    client_pool = ClientPool()
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        for i, path, body, status, problem in ex.map(send_json, enumerate(requests)):
            statuses[status] += 1
            if problem:
                failures.append(f"#{i} POST {path} {body[:300]!r} -> {problem}")
        raw_statuses = list(ex.map(lambda data: send_raw(fuzz_server, data), raw_cases))
    for data, status in zip(raw_cases, raw_statuses):
        statuses[f"raw {status}"] += 1
        if status is not None and status >= 500:
            failures.append(f"raw {data[:200]!r} -> {status}")
    elapsed = time.monotonic() - started
    total = len(requests) + len(raw_cases)
    print(f"\nfuzz: {total} requests in {elapsed:.1f} s (seed {SEED}): {dict(statuses)}")

    assert fuzz_server.alive(), f"the server died\n{fuzz_server.log_tail()}"
    assert total >= 5000 * min(SCALE, 1)
    assert not failures, f"{len(failures)} bad answers, first 20:\n" + "\n".join(failures[:20])
    assert statuses[200] > 100, f"too few requests got through validation: {dict(statuses)}"
    with httpx.Client(base_url=fuzz_server.url, timeout=30) as c:
        assert c.get("/health").status_code == 200
        deadline = time.monotonic() + 30
        while True:
            m = kiln_server.metrics(fuzz_server.url)
            if (m["kiln:num_requests_running"], m["kiln:num_requests_waiting"],
                    m["kiln:kv_cache_usage_perc"]) == (0, 0, 0) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert m["kiln:num_requests_running"] == 0, "requests left running after the fuzz run"
        assert m["kiln:num_requests_waiting"] == 0, "requests left waiting after the fuzz run"
        assert m["kiln:kv_cache_usage_perc"] == 0, "KV blocks leaked after the fuzz run"
