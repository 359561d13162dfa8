"""The routes besides completions and chat: tokenize, detokenize, models, health, version,
metrics, Triton's generate and generate_stream, and /generate."""

import re

import pytest

import kiln_server
import wire
from conftest import MAX_MODEL_LEN, SERVED_NAME

# The names issue 6 lists: `kiln:` + vLLM's suffixes, so vLLM dashboards port over.
GAUGES = ["num_requests_running", "num_requests_waiting", "kv_cache_usage_perc"]
COUNTERS = ["prefix_cache_queries_total", "prefix_cache_hits_total", "num_preemptions_total",
            "prompt_tokens_total", "generation_tokens_total", "request_success_total"]
HISTOGRAMS = ["time_to_first_token_seconds", "inter_token_latency_seconds",
              "e2e_request_latency_seconds", "request_queue_time_seconds"]


def test_ready_line_and_health(server, http):
    line = server.ready_line()
    assert line is not None, f"no 'serving ... on http://' line:\n{server.log_tail()}"
    assert f"http://{server.host}:{server.port}" in line
    assert set(server.health_statuses) <= {200, 503}, server.health_statuses
    response = http.get("/health")
    assert response.status_code == 200


def test_version(http):
    response = http.get("/version")
    assert response.status_code == 200
    assert re.match(r"^\d+\.\d+", response.json()["version"])


def test_models(http):
    response = http.get("/v1/models")
    body = wire.check_response("/v1/models", response.status_code,
                               response.headers["content-type"], response.content)
    assert [m["id"] for m in body["data"]] == [SERVED_NAME]


@pytest.mark.parametrize("text", ["Hello, world!", "naïve café — 東京 🙂", "  spaces\tand\nlines  ",
                                  "<|im_start|>user"])
def test_tokenize_detokenize_round_trip(http, text):
    response = http.post("/tokenize", json={"prompt": text, "add_special_tokens": False})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["count"] == len(body["tokens"]) > 0
    assert body["max_model_len"] == MAX_MODEL_LEN
    back = http.post("/detokenize", json={"tokens": body["tokens"]})
    assert back.status_code == 200, back.text
    assert back.json()["prompt"] == text


def test_tokenize_messages_counts_like_chat(http):
    messages = [{"role": "user", "content": "What is 2 + 2?"}]
    response = http.post("/tokenize", json={"messages": messages, "add_generation_prompt": True})
    assert response.status_code == 200, response.text
    _, chat = wire.post(http, "/v1/chat/completions", {"model": SERVED_NAME, "messages": messages,
                                                      "max_tokens": 1})
    assert response.json()["count"] == chat["usage"]["prompt_tokens"]


def test_tokenize_and_detokenize_bad_input(http):
    for path, payload in [("/tokenize", {}), ("/tokenize", {"prompt": 5}),
                          ("/detokenize", {"tokens": "abc"}), ("/detokenize", {"tokens": [-1]}),
                          ("/detokenize", {"tokens": [10 ** 9]}), ("/detokenize", {})]:
        response = http.post(path, json=payload)
        assert response.status_code == 400, f"{path} {payload}: {response.status_code}"
        wire.check_response(path, 400, response.headers["content-type"], response.content)


def test_metrics_names_and_counts(server, http):
    before = kiln_server.metrics(server.url)
    _, body = wire.post(http, "/v1/completions", {"model": SERVED_NAME, "prompt": "Hi there",
                                                  "max_tokens": 3, "ignore_eos": True})
    response = http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    m = kiln_server.parse_metrics(text)
    for name in GAUGES + COUNTERS:
        assert f"kiln:{name}" in m, f"kiln:{name} missing from /metrics"
    for name in HISTOGRAMS:
        for suffix in ("_bucket", "_sum", "_count"):
            assert f"kiln:{name}{suffix}" in m, f"kiln:{name}{suffix} missing from /metrics"
        assert re.search(rf'^kiln:{name}_bucket{{[^}}]*le="\+Inf"', text, re.M)
    assert re.search(r'^kiln:request_success_total{[^}]*finished_reason="length"', text, re.M)
    for name in ["# TYPE kiln:num_requests_running gauge", "# TYPE kiln:generation_tokens_total counter",
                 "# TYPE kiln:time_to_first_token_seconds histogram"]:
        assert name in text
    assert m["kiln:generation_tokens_total"] - before["kiln:generation_tokens_total"] == 3
    assert m["kiln:prompt_tokens_total"] - before["kiln:prompt_tokens_total"] == \
        body["usage"]["prompt_tokens"]
    assert m["kiln:e2e_request_latency_seconds_count"] - \
        before["kiln:e2e_request_latency_seconds_count"] == 1
    assert m["kiln:request_success_total"] - before["kiln:request_success_total"] == 1


def test_prefix_cache_metrics_count_hits(server, http):
    prompt = "A long shared preamble that fills several KV blocks. " * 8
    before = kiln_server.metrics(server.url)
    for _ in range(2):
        wire.post(http, "/v1/completions", {"model": SERVED_NAME, "prompt": prompt, "max_tokens": 1})
    after = kiln_server.metrics(server.url)
    assert after["kiln:prefix_cache_queries_total"] > before["kiln:prefix_cache_queries_total"]
    assert after["kiln:prefix_cache_hits_total"] > before["kiln:prefix_cache_hits_total"]


def test_triton_generate_and_stream(http):
    payload = {"text_input": "The capital of France is", "max_tokens": 6, "temperature": 0}
    path = f"/v2/models/{SERVED_NAME}/generate"
    response, body = wire.post(http, path, payload)
    assert response.status_code == 200, response.text
    assert isinstance(body["text_output"], str) and body["text_output"]
    _, completion = wire.post(http, "/v1/completions", {"model": SERVED_NAME, "max_tokens": 6,
                                                        "prompt": payload["text_input"],
                                                        "temperature": 0})
    assert body["text_output"] == completion["choices"][0]["text"]
    response, events = wire.post(http, path + "_stream", payload)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    assert "".join(e["text_output"] for e in events) == body["text_output"]


def test_simple_generate(http):
    response, body = wire.post(http, "/generate", {"prompt": "The capital of France is",
                                                   "max_tokens": 5, "temperature": 0,
                                                   "stop": ["\n\n\n"]})
    assert response.status_code == 200, response.text
    assert isinstance(body["text"], str)
    assert 1 <= body["tokens_generated"] <= 5
    assert body["latency_ms"] > 0
    response = http.post("/generate", json={"prompt": "x", "max_tokens": "five"})
    assert response.status_code == 400
    wire.check_response("/generate", 400, response.headers["content-type"], response.content)
