"""Disconnects, many concurrent streams, and SIGTERM with requests in flight."""

import asyncio
import socket
import threading
import time

import httpx

import kiln_server
import wire
from conftest import SERVED_NAME


def wait_for_metrics(url, predicate, timeout):
    """Polls /metrics until predicate(metrics) holds; returns (metrics, seconds waited)."""
    start = time.monotonic()
    while True:
        m = kiln_server.metrics(url)
        if predicate(m) or time.monotonic() - start > timeout:
            return m, time.monotonic() - start
        time.sleep(0.02)


def idle(m):
    return m.get("kiln:num_requests_running") == 0 and m.get("kiln:num_requests_waiting") == 0 \
        and m.get("kiln:kv_cache_usage_perc") == 0


def raw_request(server, payload: bytes) -> socket.socket:
    sock = socket.create_connection((server.host, server.port), timeout=30)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload)
    return sock


def check_abort(server, sock):
    running, _ = wait_for_metrics(server.url, lambda m: m["kiln:num_requests_running"] >= 1, 30)
    assert running["kiln:num_requests_running"] >= 1, "the request never ran"
    assert running["kiln:kv_cache_usage_perc"] > 0, "a running request holds no KV blocks"
    sock.close()
    after, waited = wait_for_metrics(server.url, idle, 5)
    assert idle(after), f"not idle 5 s after the disconnect: running " \
        f"{after['kiln:num_requests_running']}, kv {after['kiln:kv_cache_usage_perc']}"
    assert waited < 1.5, f"the aborted request's blocks were freed only after {waited:.2f} s"
    # No more tokens for the aborted request.
    time.sleep(0.3)
    later = kiln_server.metrics(server.url)
    assert later["kiln:generation_tokens_total"] == after["kiln:generation_tokens_total"]


def test_disconnect_mid_stream_frees_the_request(server):
    sock = raw_request(server, b'{"model": "%s", "prompt": "Tell me a story", "max_tokens": 900, '
                               b'"ignore_eos": true, "stream": true}' % SERVED_NAME.encode())
    received = b""
    while received.count(b"data: ") < 3:
        chunk = sock.recv(65536)
        assert chunk, f"the server closed the stream early: {received!r}"
        received += chunk
    assert received.startswith(b"HTTP/1.1 200")
    check_abort(server, sock)


def test_disconnect_while_waiting_for_a_full_body_frees_the_request(server):
    sock = raw_request(server, b'{"model": "%s", "prompt": "Tell me a story", "max_tokens": 900, '
                               b'"ignore_eos": true}' % SERVED_NAME.encode())
    check_abort(server, sock)


def test_200_concurrent_streaming_clients(server, http):
    prompts = [f"Client number {i} says" for i in range(10)]
    prompt_tokens = {p: len(http.post("/tokenize", json={"prompt": p}).json()["tokens"])
                     for p in prompts}
    max_tokens = 4

    def job(i):
        prompt = prompts[i % len(prompts)]
        common = {"model": SERVED_NAME, "max_tokens": max_tokens, "ignore_eos": True,
                  "stream": True, "stream_options": {"include_usage": True},
                  "temperature": 0.7, "seed": i}
        if i % 2:
            return "/v1/chat/completions", {**common, "messages": [{"role": "user", "content": prompt}]}
        return "/v1/completions", {**common, "prompt": prompt}

    jobs = [job(i) for i in range(200)]

    async def run():
        limits = httpx.Limits(max_connections=250, max_keepalive_connections=250)
        async with httpx.AsyncClient(base_url=server.url, timeout=600.0, limits=limits) as c:
            return await asyncio.gather(*(wire.apost(c, path, p) for path, p in jobs))

    started = time.monotonic()
    results = asyncio.run(run())
    elapsed = time.monotonic() - started
    for (path, payload), (response, events) in zip(jobs, results):
        assert response.status_code == 200, response.text
        assert wire.stream_finish_reasons(events) == {0: "length"}
        usage = events[-1]["usage"]
        assert events[-1]["choices"] == []
        assert usage["completion_tokens"] == max_tokens
        if path == "/v1/completions":
            assert usage["prompt_tokens"] == prompt_tokens[payload["prompt"]]
        assert usage["total_tokens"] == usage["prompt_tokens"] + max_tokens
        assert wire.stream_texts(events)[0], "an empty completion of 4 tokens"
    after, _ = wait_for_metrics(server.url, idle, 5)
    assert idle(after)
    print(f"200 streams in {elapsed:.1f} s")


def test_sigterm_finishes_in_flight_requests_and_exits_0(start_server, model_path):
    s = start_server(model_path, "--served-model-name", "m", "--shutdown-timeout", "60")
    outcome = {}
    first_chunk = threading.Event()

    def stream_request():
        payload = {"model": "m", "prompt": "Once upon a time", "max_tokens": 40, "ignore_eos": True,
                   "stream": True, "stream_options": {"include_usage": True}}
        with httpx.Client(base_url=s.url, timeout=120.0) as c:
            with c.stream("POST", "/v1/completions", json=payload) as r:
                body = b""
                for part in r.iter_bytes():
                    body += part
                    first_chunk.set()
                outcome["stream"] = (r.status_code, wire.check_response(
                    "/v1/completions", r.status_code, r.headers["content-type"], body))

    def full_request():
        payload = {"model": "m", "prompt": "The history of Rome", "max_tokens": 40,
                   "ignore_eos": True}
        with httpx.Client(base_url=s.url, timeout=120.0) as c:
            outcome["full"] = wire.post(c, "/v1/completions", payload)

    threads = [threading.Thread(target=stream_request), threading.Thread(target=full_request)]
    for t in threads:
        t.start()
    assert first_chunk.wait(60), "no first chunk"
    s.terminate()
    time.sleep(0.3)
    # No new work is accepted once SIGTERM arrived: refused, or answered 503.
    try:
        status = httpx.post(s.url + "/v1/completions", json={"model": "m", "prompt": "x",
                                                              "max_tokens": 1}, timeout=10).status_code
        assert status == 503, f"a request after SIGTERM got {status}"
    except httpx.TransportError:
        pass
    for t in threads:
        t.join(120)
    code = s.proc.wait(timeout=90)
    assert code == 0, f"exit code {code} after SIGTERM\n{s.log_tail()}"
    status, events = outcome["stream"]
    assert status == 200 and events[-1]["usage"]["completion_tokens"] == 40
    assert wire.stream_finish_reasons(events) == {0: "length"}
    response, body = outcome["full"]
    assert response.status_code == 200 and body["usage"]["completion_tokens"] == 40
