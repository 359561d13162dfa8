"""Fixtures: real `kiln serve` processes (CPU backend) and clients that validate what they get.

- `server`: one server for the whole session on the default model (SmolLM2-135M), served as
  SERVED_NAME; tests that need other flags start their own with `start_server`.
- `client`: the official `openai` client with strict response validation, over a transport that
  also validates every body and SSE event against OpenAI's OpenAPI spec (wire.py).
- Every server is stopped with SIGTERM at teardown, and must exit 0.
"""

import subprocess

import httpx
import openai
import pytest

import kiln_server
import wire

SERVED_NAME = "kiln-test-model"
# For servers on the tiny model: its KV cache needs little room, and allocating less starts faster.
TINY_ARGS = ["--served-model-name", "tiny", "--kv-cache-memory", "64MiB"]
# A context small enough that "prompt + max_tokens over the context" is cheap to provoke.
MAX_MODEL_LEN = 1024

# A 1-layer, 64-wide Llama with the SmolLM2 tokenizer shape cut to 2,048 ids: loads in
# milliseconds and steps in about a millisecond, for the fuzz run and the servers that only
# check flags.
TINY_SHAPE = ('{"preset": "smollm2-135m", "num_hidden_layers": 1, "hidden_size": 64, '
              '"intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2, '
              '"vocab_size": 2048}')


@pytest.fixture(scope="session")
def model_path():
    return kiln_server.default_model()


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny-model")
    shape = out.parent / "tiny-shape.json"
    shape.write_text(TINY_SHAPE)
    subprocess.run([kiln_server.kiln_bin(), "synth", "--shape", str(shape), "--out", str(out),
                    "--force"], check=True, capture_output=True)
    return str(out)


def _stop_and_check(server):
    code = server.stop()
    assert code == 0, f"kiln serve exited {code} after SIGTERM\n{server.log_tail()}"


@pytest.fixture(scope="session")
def server(model_path, tmp_path_factory):
    s = kiln_server.KilnServer(
        model_path, ["--served-model-name", SERVED_NAME, "--max-model-len", str(MAX_MODEL_LEN)],
        log_path=tmp_path_factory.mktemp("logs") / "server.log").start()
    yield s
    _stop_and_check(s)


@pytest.fixture
def start_server(tmp_path):
    """start_server(model, *args) -> a started KilnServer, stopped (and checked) at teardown."""
    started = []

    def start(model, *args, cpu=True):
        s = kiln_server.KilnServer(model, list(args), log_path=tmp_path / f"server{len(started)}.log",
                                   cpu=cpu)
        started.append(s)
        return s.start()

    yield start
    for s in started:
        if s.proc is not None and s.proc.returncode is None:
            _stop_and_check(s)


@pytest.fixture
def http(server):
    with httpx.Client(base_url=server.url, timeout=120.0) as c:
        yield c


def _openai_client(server, strict):
    transport = wire.ValidatingTransport()
    with httpx.Client(transport=transport, timeout=120.0) as http_client:
        yield openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0,
                            http_client=http_client, _strict_response_validation=strict)
    assert transport.problems == [], "\n".join(transport.problems)
    assert transport.num_checked > 0, "the test received no complete response to validate"


@pytest.fixture
def client(server):
    yield from _openai_client(server, strict=True)


@pytest.fixture
def lenient_client(server):
    """The client without pydantic strictness, for streamed completions only: its `Completion`
    type requires a finish_reason, which OpenAI's own streams leave null until the last chunk.
    The transport still validates every chunk against the spec."""
    yield from _openai_client(server, strict=False)
