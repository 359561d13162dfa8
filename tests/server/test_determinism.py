"""Streaming vs non-streaming, seeds under concurrency, n > 1, stop strings across tokens."""

import asyncio

import httpx
import pytest

import wire
from conftest import SERVED_NAME

SEEDED = {"model": SERVED_NAME, "max_tokens": 12, "temperature": 0.9, "top_p": 0.95, "seed": 1234}


@pytest.mark.parametrize("route,extra", [
    ("/v1/completions", {"prompt": "Once upon a time"}),
    ("/v1/completions", {"prompt": ["Once upon a time", "The sea"], "n": 2}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Tell me a story."}]}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "n": 2}),
])
def test_stream_equals_non_stream_for_a_seed(http, route, extra):
    payload = {**SEEDED, **extra}
    response, body = wire.post(http, route, payload)
    assert response.status_code == 200, response.text
    response, events = wire.post(http, route, {**payload, "stream": True})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    expected = wire.body_texts(body)
    assert wire.stream_texts(events) == expected
    assert wire.stream_finish_reasons(events) == {c["index"]: c["finish_reason"]
                                                  for c in body["choices"]}
    assert any(expected.values()), "nothing was generated"


def test_same_seed_same_text(http):
    _, a = wire.post(http, "/v1/completions", {**SEEDED, "prompt": "Once upon a time"})
    _, b = wire.post(http, "/v1/completions", {**SEEDED, "prompt": "Once upon a time"})
    _, c = wire.post(http, "/v1/completions", {**SEEDED, "prompt": "Once upon a time", "seed": 99})
    assert a["choices"][0]["text"] == b["choices"][0]["text"]
    assert a["choices"][0]["text"] != c["choices"][0]["text"]


def test_seed_alone_equals_seed_among_32_concurrent(server, http):
    reference = {**SEEDED, "prompt": "In a hole in the ground", "max_tokens": 10, "temperature": 1.0}
    _, alone = wire.post(http, "/v1/completions", reference)
    chat_reference = {**SEEDED, "messages": [{"role": "user", "content": "A poem, please."}],
                      "max_tokens": 10}
    _, chat_alone = wire.post(http, "/v1/chat/completions", chat_reference)

    async def run():
        jobs = []
        for i in range(32):
            if i % 4 == 0:
                jobs.append(("/v1/completions", reference, "ref"))
            elif i % 4 == 1:
                jobs.append(("/v1/chat/completions", {**chat_reference, "stream": i % 8 == 1}, "chat"))
            else:  # other work in the same batches: other prompts, seeds, lengths
                jobs.append(("/v1/completions", {**SEEDED, "prompt": f"Item {i}: the " * (1 + i % 5),
                                                 "seed": i, "max_tokens": 4 + i % 9,
                                                 "stream": i % 3 == 0}, "other"))
        async with httpx.AsyncClient(base_url=server.url, timeout=300.0) as c:
            return jobs, await asyncio.gather(*(wire.apost(c, path, p) for path, p, _ in jobs))

    jobs, results = asyncio.run(run())
    for (path, payload, kind), (response, body) in zip(jobs, results):
        assert response.status_code == 200, response.text
        texts = wire.stream_texts(body) if payload.get("stream") else wire.body_texts(body)
        if kind == "ref":
            assert texts[0] == alone["choices"][0]["text"]
        elif kind == "chat":
            assert texts[0] == chat_alone["choices"][0]["message"]["content"]


def test_n_gives_distinct_indices_and_is_repeatable(http):
    payload = {**SEEDED, "prompt": "My favourite animal is", "n": 4, "temperature": 1.2}
    _, a = wire.post(http, "/v1/completions", payload)
    _, b = wire.post(http, "/v1/completions", payload)
    assert sorted(c["index"] for c in a["choices"]) == [0, 1, 2, 3]
    assert wire.body_texts(a) == wire.body_texts(b)
    assert len(set(wire.body_texts(a).values())) > 1, "n=4 at T=1.2 gave 4 equal texts"
    assert 4 <= a["usage"]["completion_tokens"] <= 4 * payload["max_tokens"]


def _straddling_stop(tokens: list, text: str):
    """A stop string made of the end of token i and the start of token i+1 whose first
    occurrence in `text` is exactly there; returns (stop, where it starts) or None."""
    offset = 0
    for i in range(len(tokens) - 1):
        left, right = tokens[i], tokens[i + 1]
        offset += len(left)
        if not (left.strip() and right.strip() and left.isascii() and right.isascii()):
            continue
        for a in (2, 1):
            for b in (2, 1):
                if len(left) < a or len(right) < b:
                    continue
                stop = left[-a:] + right[:b]
                if text.find(stop) == offset - a:
                    return stop, offset - a
    return None


@pytest.mark.parametrize("stream", [False, True])
def test_stop_string_straddling_two_tokens(http, stream):
    base = {"model": SERVED_NAME, "prompt": "Here is a list of fruits: apple, banana,",
            "max_tokens": 24, "temperature": 0, "ignore_eos": True}
    _, full = wire.post(http, "/v1/completions", {**base, "logprobs": 1})
    tokens = full["choices"][0]["logprobs"]["tokens"]
    text = full["choices"][0]["text"]
    found = _straddling_stop(tokens, text)
    assert found, f"no stop string straddling two tokens in {tokens!r}"
    stop, where = found
    response, body = wire.post(http, "/v1/completions", {**base, "stop": [stop], "stream": stream})
    assert response.status_code == 200, response.text
    if stream:
        got, reason = wire.stream_texts(body)[0], wire.stream_finish_reasons(body)[0]
    else:
        got, reason = body["choices"][0]["text"], body["choices"][0]["finish_reason"]
    assert got == text[:where], f"stop {stop!r} across {tokens!r}"
    assert reason == "stop"
