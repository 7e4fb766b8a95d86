"""``straggler-lens serve`` as a child process on a free loopback port, for the benches and the
tests that need a real server process (kill -9, restarts, several replicas).

The child runs this checkout (``python -m server.cli`` from the repo root with
``PYTHONPATH=<repo root>``), so it serves the same code as the caller.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the OS picks it; it may be taken again later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_serve(port: int, log: Path, *args: str, timeout: float = 60.0) -> subprocess.Popen[bytes]:
    """Start ``serve --port PORT --log-level warning ARGS...`` and return once ``/healthz``
    answers 200 on 127.0.0.1:PORT.

    The child's output is appended to ``log`` (a restart on the same log keeps the first run's
    lines). Raises RuntimeError with the log's text when the child exits before it answers, and
    kills it and raises after ``timeout`` seconds.
    """
    cmd = [sys.executable, "-m", "server.cli", "serve", "--port", str(port), "--log-level", "warning", *args]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with log.open("ab") as out:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    proc.wait(10)
    raise RuntimeError(f"server did not answer /healthz within {timeout} s; see {log}")
