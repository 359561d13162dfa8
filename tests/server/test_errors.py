"""Bad input: each gets its HTTP status and an OpenAI error body ({"error": {"message", "type",
"param", "code"}}, validated against the spec) naming the offending field."""

import asyncio

import httpx
import pytest

import kiln_server
import wire
from conftest import MAX_MODEL_LEN, SERVED_NAME, TINY_ARGS

COMPLETION = {"model": SERVED_NAME, "prompt": "hi", "max_tokens": 2}
CHAT = {"model": SERVED_NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def check_error(response, path, status, param=None):
    assert response.status_code == status, f"{path}: expected {status}, got " \
                                           f"{response.status_code}: {response.text[:500]}"
    body = wire.check_response(path, response.status_code, response.headers.get("content-type", ""),
                               response.content)
    error = body["error"]
    assert error["message"] and error["type"]
    if param is not None:  # the field, or a path inside it ("messages[0].role")
        named = error["param"] or ""
        assert named == param or named.startswith((param + ".", param + "[")), \
            f"error names {error['param']!r}, not {param!r}: {error}"
        assert param in error["message"], f"message does not name {param!r}: {error['message']!r}"
    return error


INVALID_COMPLETIONS = [
    ({"temperature": 3}, "temperature"),
    ({"temperature": -0.5}, "temperature"),
    ({"temperature": "hot"}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"n": 0}, "n"),
    ({"n": "two"}, "n"),
    ({"logprobs": 21}, "logprobs"),
    ({"logprobs": -1}, "logprobs"),
    ({"max_tokens": "ten"}, "max_tokens"),
    ({"max_tokens": -1}, "max_tokens"),
    ({"max_tokens": 2.5}, "max_tokens"),
    ({"prompt": 5}, "prompt"),
    ({"prompt": []}, "prompt"),
    ({"prompt": [1, "a"]}, "prompt"),
    ({"prompt": [[1, 2], []]}, "prompt"),
    ({"prompt": [10 ** 9]}, "prompt"),
    ({"prompt": {"text": "hi"}}, "prompt"),
    ({"stop": [f"s{i}" for i in range(17)]}, "stop"),
    ({"stop": 5}, "stop"),
    ({"logit_bias": {"5": 101}}, "logit_bias"),
    ({"logit_bias": {"5": -101}}, "logit_bias"),
    ({"logit_bias": {"abc": 1}}, "logit_bias"),
    ({"logit_bias": {"999999999": 1}}, "logit_bias"),
    ({"logit_bias": [1, 2]}, "logit_bias"),
    ({"presence_penalty": 3}, "presence_penalty"),
    ({"frequency_penalty": -2.5}, "frequency_penalty"),
    ({"stream": "yes"}, "stream"),
    ({"echo": "yes"}, "echo"),
    ({"seed": "x"}, "seed"),
    ({"stream_options": {"include_usage": "x"}, "stream": True}, "stream_options"),
    ({"suffix": "the end"}, "suffix"),
    ({"best_of": 2}, "best_of"),
]

INVALID_CHAT = [
    ({"messages": "hi"}, "messages"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "messages"),
    ({"messages": [{"content": "x"}]}, "messages"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url",
                                                  "image_url": {"url": "http://x/y.png"}}]}]},
     "messages"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"top_logprobs": 2}, "top_logprobs"),  # without logprobs: true
    ({"temperature": 3}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"n": 0}, "n"),
    ({"max_tokens": "x"}, "max_tokens"),
    ({"max_completion_tokens": -1}, "max_completion_tokens"),
    ({"stop": [f"s{i}" for i in range(17)]}, "stop"),
    ({"logit_bias": {"5": 101}}, "logit_bias"),
    ({"tools": "get_weather"}, "tools"),
]


@pytest.mark.parametrize("override,param", INVALID_COMPLETIONS,
                         ids=[f"{p}={v[p]!r}"[:40] for v, p in INVALID_COMPLETIONS])
def test_invalid_completions_param(http, override, param):
    check_error(http.post("/v1/completions", json={**COMPLETION, **override}), "/v1/completions",
                400, param)


@pytest.mark.parametrize("override,param", INVALID_CHAT,
                         ids=[f"{p}={v[p]!r}"[:40] for v, p in INVALID_CHAT])
def test_invalid_chat_param(http, override, param):
    check_error(http.post("/v1/chat/completions", json={**CHAT, **override}),
                "/v1/chat/completions", 400, param)


@pytest.mark.parametrize("path,payload", [("/v1/completions", COMPLETION),
                                          ("/v1/chat/completions", CHAT)])
def test_missing_model_and_unknown_model(http, path, payload):
    # OpenAI requires `model`; vLLM serves its one model when it is missing. Either is fine.
    response = http.post(path, json={k: v for k, v in payload.items() if k != "model"})
    if response.status_code == 200:
        assert wire.check_response(path, 200, response.headers["content-type"],
                                   response.content)["model"] == SERVED_NAME
    else:
        check_error(response, path, 400, "model")
    error = check_error(http.post(path, json={**payload, "model": "no-such-model"}), path, 404)
    assert "no-such-model" in error["message"]


def test_unknown_triton_model_is_404(http):
    path = "/v2/models/no-such-model/generate"
    check_error(http.post(path, json={"text_input": "hi", "max_tokens": 2}), path, 404)


@pytest.mark.parametrize("path,payload", [
    ("/v1/completions", {**COMPLETION, "max_tokens": MAX_MODEL_LEN}),
    ("/v1/completions", {**COMPLETION, "prompt": "hello " * (MAX_MODEL_LEN + 10), "max_tokens": 1}),
    ("/v1/completions", {**COMPLETION, "prompt": "hello " * (MAX_MODEL_LEN // 2), "max_tokens": MAX_MODEL_LEN // 2 + 50}),
    ("/v1/chat/completions", {**CHAT, "max_tokens": MAX_MODEL_LEN + 1}),
    ("/v1/chat/completions", {**CHAT, "messages": [{"role": "user", "content": "hi " * (MAX_MODEL_LEN + 10)}]}),
])
def test_over_the_context_is_400(http, path, payload):
    error = check_error(http.post(path, json=payload), path, 400)
    assert str(MAX_MODEL_LEN) in error["message"], f"message does not give the context: {error}"


@pytest.mark.parametrize("body", [b'{"model":', b"", b"[1, 2]", b"null", b'{"model": "x",}',
                                  b"{'model': 'x'}", b'{"model": "x"} trailing'])
def test_invalid_json_is_400(http, body):
    for path in ("/v1/completions", "/v1/chat/completions"):
        check_error(http.post(path, content=body, headers={"content-type": "application/json"}),
                    path, 400)


@pytest.mark.parametrize("body", [
    b'{"model": "kiln-test-model", "prompt": "\xff\xfe", "max_tokens": 1}',
    b'{"model": "kiln-test-model", "prompt": "caf\xc3", "max_tokens": 1}',
    b'{"model": "kiln-test-model", "prompt": "\xc0\xaf", "max_tokens": 1}',  # overlong '/'
    b'{"model": "kiln-test-model", "prompt": "\xed\xa0\x80", "max_tokens": 1}',  # a surrogate
    b'{"model\xff": "kiln-test-model", "prompt": "x", "max_tokens": 1}',
])
def test_invalid_utf8_is_400(http, body):
    check_error(http.post("/v1/completions", content=body,
                          headers={"content-type": "application/json"}), "/v1/completions", 400)


def test_unknown_route_is_404(http):
    for method, path in [("GET", "/v1/nope"), ("POST", "/v1/nope"), ("GET", "/nope"),
                         ("POST", "/v2/models/kiln-test-model/nope")]:
        check_error(http.request(method, path, json={}), path, 404)


def test_wrong_method_is_4xx(http):
    for method, path in [("GET", "/v1/completions"), ("DELETE", "/v1/chat/completions"),
                         ("POST", "/v1/models"), ("POST", "/health")]:
        response = http.request(method, path)
        assert response.status_code in (404, 405), f"{method} {path}: {response.status_code}"
        wire.check_response(path, response.status_code, response.headers.get("content-type", ""),
                            response.content)


def test_body_over_the_limit_is_413(start_server, tiny_model):
    s = start_server(tiny_model, *TINY_ARGS, "--max-request-body-bytes", "4096")
    with httpx.Client(base_url=s.url, timeout=60.0) as c:
        small = {"model": "tiny", "prompt": "x" * 3000, "max_tokens": 1}
        response, _ = wire.post(c, "/v1/completions", small)
        assert response.status_code == 200, response.text
        big = {"model": "tiny", "prompt": "x" * 5000, "max_tokens": 1}
        check_error(c.post("/v1/completions", json=big), "/v1/completions", 413)
        check_error(c.post("/v1/chat/completions", json={"model": "tiny", "messages": [
            {"role": "user", "content": "y" * 8000}]}), "/v1/chat/completions", 413)
        # The server goes on serving after refusing.
        assert c.get("/health").status_code == 200


def test_api_keys(start_server, tiny_model, tmp_path):
    key_file = tmp_path / "keys"
    key_file.write_text("key-from-file\n")
    servers = [start_server(tiny_model, *TINY_ARGS, "--api-key", "k-one",
                            "--api-key", "k-two"),
               start_server(tiny_model, *TINY_ARGS, "--api-key-file",
                            str(key_file))]
    payload = {"model": "tiny", "prompt": "hi", "max_tokens": 1}
    for s, good_keys in zip(servers, [["k-one", "k-two"], ["key-from-file"]]):
        with httpx.Client(base_url=s.url, timeout=60.0) as c:
            for headers in [{}, {"Authorization": "Bearer wrong"},
                            {"Authorization": f"Bearer {good_keys[0]}x"},
                            {"Authorization": f"Bearer {good_keys[0][:-1]}"},
                            {"Authorization": good_keys[0]},
                            {"Authorization": "Bearer"}]:
                check_error(c.post("/v1/completions", json=payload, headers=headers),
                            "/v1/completions", 401)
                check_error(c.get("/v1/models", headers=headers), "/v1/models", 401)
            for key in good_keys:
                response, _ = wire.post(c, "/v1/completions", payload,
                                        headers={"Authorization": f"Bearer {key}"})
                assert response.status_code == 200, response.text
            # Load balancers probe /health without a key.
            assert c.get("/health").status_code == 200


def test_over_the_admission_limit_is_429_with_retry_after(start_server, model_path):
    s = start_server(model_path, "--served-model-name", "m", "--max-num-seqs", "1",
                     "--max-num-waiting", "1")
    payload = {"model": "m", "prompt": "Tell me a long story.", "max_tokens": 24,
               "ignore_eos": True, "stream": True}

    async def run():
        async with httpx.AsyncClient(base_url=s.url, timeout=300.0) as c:
            # One request running (its first chunk arrived), then 7 at once: one of them fits
            # the single waiting place, the other 6 are refused.
            first = asyncio.create_task(wire.apost(c, "/v1/completions", payload))
            while kiln_server.metrics(s.url)["kiln:num_requests_running"] < 1:
                await asyncio.sleep(0.02)
            rest = await asyncio.gather(*(wire.apost(c, "/v1/completions", payload)
                                          for _ in range(7)))
            return [await first] + rest

    results = asyncio.run(run())
    statuses = [r.status_code for r, _ in results]
    assert sorted(statuses) == [200] * 2 + [429] * 6, statuses
    for response, body in results:
        if response.status_code == 429:
            retry_after = response.headers.get("retry-after")
            assert retry_after is not None and retry_after.strip().isdigit(), \
                f"429 without a Retry-After in seconds: {dict(response.headers)}"
            assert body["error"]["message"]
        else:  # accepted requests are never dropped: every one runs to its length
            assert wire.stream_finish_reasons(body) == {0: "length"}
            assert len("".join(wire.stream_texts(body).values())) > 0
