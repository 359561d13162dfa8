"""`kiln bench serve` against a real `kiln serve` (the default model, CPU): every request measured,
exact token counts from token-id prompts, and the JSON and PNG outputs a user reads."""
import json
import subprocess

import kiln_server
from conftest import SERVED_NAME


def run_bench(server, model_path, tmp_path, *args):
    out = tmp_path / "bench.json"
    cmd = [kiln_server.kiln_bin(), "bench", "serve", "--base-url", server.url, "--tokenizer",
           model_path, "--no-progress", "--json", str(out), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(out.read_text()), done.stdout


def test_completions_with_exact_lengths(server, model_path, tmp_path):
    report, table = run_bench(server, model_path, tmp_path, "--input-len", "24", "--output-len",
                              "6", "--num-requests", "6", "--max-concurrency", "3",
                              "--ignore-eos", "--request-rate", "20,inf", "--goodput",
                              "ttft:60000", "--plot", str(tmp_path / "plot"))
    assert report["config"]["model"] == SERVED_NAME  # asked GET /v1/models
    assert [r["request_rate"] for r in report["runs"]] == [20.0, "inf"]
    for run in report["runs"]:
        s = run["summary"]
        assert s["num_completed"] == 6 and s["num_failed"] == 0
        assert s["total_input_tokens"] == 6 * 24  # token ids arrive as sent
        assert s["total_output_tokens"] == 6 * 6  # ignore_eos: exactly max_tokens
        assert s["num_good"] == 6
        assert 0 < s["ttft"]["p50"] <= s["e2el"]["p50"]
        assert s["tpot"]["count"] == 6 and s["tpot"]["mean"] > 0
    assert "Successful requests:" in table and "Median TTFT (ms):" in table
    for name in ("plot-timeline-20.png", "plot-timeline-inf.png", "plot-latency.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name


def test_chat_endpoint_and_server_errors(server, model_path, tmp_path):
    report, _ = run_bench(server, model_path, tmp_path, "--endpoint", "chat", "--input-len", "16",
                          "--output-len", "4", "--num-requests", "3")
    assert report["runs"][0]["summary"]["num_completed"] == 3
    # A model the server does not serve: every request fails with 404, counted, exit 0.
    report, table = run_bench(server, model_path, tmp_path, "--model", "no-such-model",
                              "--input-len", "8", "--output-len", "2", "--num-requests", "2")
    s = report["runs"][0]["summary"]
    assert s["num_failed"] == 2 and s["errors"] == {"http 404": 2}
    assert "no-such-model" in s["error_examples"]["http 404"]
    assert "http 404" in table
