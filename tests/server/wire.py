"""Checks on what goes over the wire: every response body and SSE event of the OpenAI routes is
validated against the OpenAPI spec, and SSE framing is checked (data-only events, `[DONE]` last).

`ValidatingTransport` wraps httpx's transport so that everything the official `openai` client
receives is checked too, without the test doing anything.
"""

import json

import httpx

import openapi

_BODY_SCHEMAS = {
    "/v1/completions": ("CreateCompletionResponse", "CreateCompletionResponse"),
    "/v1/chat/completions": ("CreateChatCompletionResponse", "CreateChatCompletionStreamResponse"),
    "/v1/models": ("ListModelsResponse", None),
}


def parse_sse(data: bytes, expect_done: bool = True) -> list:
    """SSE bytes -> the JSON objects of its `data:` events, in order. Asserts well-formed framing:
    every event is one `data: ` line, the stream ends with a blank line and, when expect_done,
    `data: [DONE]` is the last event and appears once."""
    text = data.decode("utf-8")
    assert text.endswith("\n\n"), f"SSE stream does not end with a blank line: {text[-200:]!r}"
    events = []
    done = False
    for block in text.split("\n\n")[:-1]:
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        assert len(lines) == 1 and lines[0].startswith("data: "), f"bad SSE event {block!r}"
        payload = lines[0][len("data: "):]
        assert not done, f"event after [DONE]: {payload!r}"
        if payload == "[DONE]":
            done = True
            continue
        events.append(json.loads(payload))
    if expect_done:
        assert done, "SSE stream has no final `data: [DONE]`"
    return events


def check_response(path: str, status: int, content_type: str, body: bytes):
    """Validates one complete response of an OpenAI route; returns the JSON body, or the list of
    SSE event objects for a stream."""
    if status >= 400:
        assert content_type.startswith("application/json"), (
            f"{path} answered {status} with content type {content_type!r}, not JSON")
        parsed = json.loads(body)
        openapi.validate("ErrorResponse", parsed)
        return parsed
    schemas = _BODY_SCHEMAS.get(path)
    if content_type.startswith("text/event-stream"):
        # Triton's generate_stream ends without `[DONE]`; OpenAI's routes end with it.
        events = parse_sse(body, expect_done=path.startswith("/v1/"))
        if schemas and schemas[1]:
            for event in events:
                openapi.validate(schemas[1], event)
        return events
    parsed = json.loads(body)
    if schemas:
        openapi.validate(schemas[0], parsed)
    if path == "/v1/completions":  # see openapi.py: only stream chunks may leave it null
        assert all(c["finish_reason"] is not None for c in parsed["choices"]), parsed
    return parsed


class ValidatingTransport(httpx.BaseTransport):
    """An httpx transport that validates every response it fully delivers (check_response).
    Violations are collected in `problems` (raising inside httpx's stream would be swallowed or
    turn into a transport error); the fixture that owns it asserts none were seen."""

    def __init__(self):
        self.inner = httpx.HTTPTransport()
        self.problems = []
        self.num_checked = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        owner = self
        upstream = response.stream
        path = request.url.path

        class Tee(httpx.SyncByteStream):
            # NOTE: the openai client stops reading a stream at `[DONE]`, possibly before the byte
            # iterator ends, so a stream is also checked on close when its last event arrived; a
            # stream the test itself cut short is not checked.
            def __init__(self):
                self.parts = []
                self.checked = False

            def __iter__(self):
                for part in upstream:
                    self.parts.append(part)
                    yield part
                self._check()

            def _check(self):
                if not self.checked:
                    self.checked = True
                    owner._check(path, response.status_code,
                                 response.headers.get("content-type", ""), b"".join(self.parts))

            def close(self):
                if b"".join(self.parts[-2:]).endswith(b"data: [DONE]\n\n"):
                    self._check()
                upstream.close()

        return httpx.Response(status_code=response.status_code, headers=response.headers,
                              stream=Tee(), extensions=response.extensions, request=request)

    def _check(self, path, status, content_type, body):
        try:
            check_response(path, status, content_type, body)
            self.num_checked += 1
        except Exception as e:  # noqa: BLE001 -- reported by the fixture with the path
            self.problems.append(f"{path} ({status}): {e}")

    def close(self):
        self.inner.close()


def post(client: httpx.Client, path: str, payload=None, **kw):
    """POST through a plain httpx client; returns (response, checked JSON body or SSE events)."""
    response = client.post(path, json=payload, **kw)
    return response, check_response(path, response.status_code,
                                    response.headers.get("content-type", ""), response.content)


async def apost(client: httpx.AsyncClient, path: str, payload=None, **kw):
    """The asyncio twin of post()."""
    async with client.stream("POST", path, json=payload, **kw) as response:
        body = await response.aread()
    return response, check_response(path, response.status_code,
                                    response.headers.get("content-type", ""), body)


def stream_texts(events: list) -> dict:
    """Completion or chat SSE events -> {choice index: concatenated text}."""
    texts = {}
    for event in events:
        for choice in event["choices"]:
            piece = choice["text"] if "text" in choice else (choice["delta"].get("content") or "")
            texts[choice["index"]] = texts.get(choice["index"], "") + piece
    return texts


def stream_finish_reasons(events: list) -> dict:
    """{choice index: the finish_reason of its last chunk}; asserts each choice has exactly one."""
    reasons = {}
    for event in events:
        for choice in event["choices"]:
            if choice.get("finish_reason") is not None:
                assert choice["index"] not in reasons, f"two finish_reasons for {choice['index']}"
                reasons[choice["index"]] = choice["finish_reason"]
    return reasons


def body_texts(body: dict) -> dict:
    """A non-streaming completion or chat body -> {choice index: text}."""
    return {c["index"]: c["text"] if "text" in c else c["message"]["content"] for c in body["choices"]}
