"""Starting and stopping a real `kiln serve` process (used by the pytest fixtures and the
server benchmark; standard library only, so the benchmark runs on a bare machine).

The binary is $KILN_BIN or build/kiln; the default model is $KILN_DEFAULT_MODEL or what
scripts/fetch-default-model prints.
"""

import os
import pathlib
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


def kiln_bin() -> str:
    path = os.environ.get("KILN_BIN") or str(REPO_ROOT / "build" / "kiln")
    if not os.access(path, os.X_OK):
        raise FileNotFoundError(f"{path} is not an executable: build kiln first or set KILN_BIN")
    return path


def default_model() -> str:
    path = os.environ.get("KILN_DEFAULT_MODEL")
    if not path:
        path = subprocess.run(
            [str(REPO_ROOT / "scripts" / "fetch-default-model")],
            check=True, capture_output=True, text=True,
        ).stdout.strip()
    if not os.path.exists(path):
        raise FileNotFoundError(f"default model {path!r} does not exist")
    return path


def free_port() -> int:
    # NOTE: the port is free when this returns; another process could take it before the server
    # binds, which is unlikely enough on a test machine (and shows up as a start failure).
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class KilnServer:
    """One `kiln serve` process on 127.0.0.1 with its output in `log_path`."""

    def __init__(self, model: str, args=(), log_path=None, cpu=True):
        self.model = model
        self.port = free_port()
        self.host = "127.0.0.1"
        self.url = f"http://{self.host}:{self.port}"
        self.args = list(args)
        self.cpu = cpu
        self.log_path = pathlib.Path(log_path or f"/tmp/kiln-serve-{self.port}.log")
        self.proc = None

    def command(self):
        cmd = [kiln_bin(), "serve", self.model, "--host", self.host, "--port", str(self.port)]
        if self.cpu:
            cmd += ["--device", "cpu"]
        return cmd + self.args

    def start(self, timeout: float = 180.0) -> "KilnServer":
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.command(), stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        self.health_statuses = []  # every /health status seen while waiting (503 while loading)
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kiln serve exited with {self.proc.returncode} before it was "
                                   f"ready: {' '.join(self.command())}\n{self.log_tail()}")
            status = http_get(self.url + "/health", timeout=2.0)[0]
            if status is not None:
                self.health_statuses.append(status)
            if status == 200:
                return self
            if time.monotonic() > deadline:
                self.kill()
                raise TimeoutError(f"kiln serve was not ready (GET /health 200) within {timeout} s:"
                                   f" {' '.join(self.command())}\n{self.log_tail()}")
            time.sleep(0.05)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def ready_line(self):
        """The "serving ... on http://host:port" line, or None."""
        for line in self.log_text().splitlines():
            if re.search(r"serving .* on http://", line):
                return line
        return None

    def terminate(self) -> None:
        self.proc.send_signal(signal.SIGTERM)

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM, then wait; returns the exit code (kills and raises on a hang)."""
        if self.proc.poll() is None:
            self.terminate()
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise TimeoutError(f"kiln serve did not exit within {timeout} s of SIGTERM\n"
                               f"{self.log_tail()}")
        self.log.close()
        return code

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def parse_metrics(text: str) -> dict:
    """Prometheus text -> {name: summed value over every label set} plus {"name{labels}": v}."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line)
        if not m:
            raise ValueError(f"not a Prometheus sample line: {line!r}")
        name, labels, value = m.group(1), m.group(2) or "", float(m.group(3))
        out[name] = out.get(name, 0.0) + value
        out[name + labels] = value
    return out


def http_get(url: str, timeout: float = 10.0):
    """(status, body bytes), or (None, b"") when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None, b""


def metrics(url: str) -> dict:
    status, body = http_get(url + "/metrics")
    if status != 200:
        raise RuntimeError(f"GET {url}/metrics answered {status}: {body[:200]!r}")
    return parse_metrics(body.decode())
