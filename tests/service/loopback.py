"""A real HTTP receiver on 127.0.0.1 for the service tests (importable: pytest puts this folder on
sys.path). It records every request and answers from a script of statuses, optionally holding
requests open until released. The live app itself is ``tests._support.live`` (re-exported here)."""

from __future__ import annotations

import http.server
import importlib.util
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from tests._support.live import Live, LiveServer

__all__ = ["Live", "LiveServer", "Received", "Receiver", "Script", "server_tests_module", "wait_for"]


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Script:
    """Statuses to answer, in order (the last one repeats); ``hold`` = how many first requests to
    keep open until :meth:`Receiver.release` (they are then answered 500)."""

    statuses: list[int] = field(default_factory=lambda: [200])
    hold: int = 0
    # with a key header: answer 500 to the first ``fail_first`` requests of each key, then 200
    fail_first: int = 0
    key_header: str | None = None


class Receiver:
    def __init__(self, script: Script | None = None):
        self.script = script or Script()
        self.requests: list[Received] = []
        self.answered: list[tuple[Received, int]] = []
        self._lock = threading.Lock()
        self._released = threading.Event()
        self.arrived = threading.Condition(self._lock)
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _handle(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                rec = Received(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                with owner.arrived:
                    index = len(owner.requests)
                    owner.requests.append(rec)
                    owner.arrived.notify_all()
                key = rec.headers.get(owner.script.key_header or "", "")
                if index < owner.script.hold:
                    owner._released.wait(60)
                    status = 500
                elif owner.script.key_header:
                    with owner._lock:
                        seen = sum(1 for r in owner.requests if r.headers.get(owner.script.key_header) == key)
                    status = 500 if seen <= owner.script.fail_first else 200
                else:
                    statuses = owner.script.statuses
                    status = statuses[min(index - owner.script.hold, len(statuses) - 1)]
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"{}")
                except OSError:
                    return
                with owner._lock:
                    owner.answered.append((rec, status))

            do_POST = do_PUT = do_GET = _handle

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def wait_for(self, n: int, timeout: float = 30) -> list[Received]:
        """Block until ``n`` requests arrived (or fail the test after ``timeout`` seconds)."""
        with self.arrived:
            ok = self.arrived.wait_for(lambda: len(self.requests) >= n, timeout)
            assert ok, f"only {len(self.requests)} of {n} requests arrived"
            return list(self.requests)

    def release(self) -> None:
        self._released.set()

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
        self.httpd.shutdown()
        self.httpd.server_close()


def wait_for(pred, timeout: float = 60.0, every: float = 0.1):  # type: ignore[no-untyped-def]
    """Poll ``pred()`` until it returns a truthy value (returned) or fail after ``timeout`` s."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s (last value {value!r})")
        time.sleep(every)


def server_tests_module(name: str) -> ModuleType:
    """A helper module of tests/server (e.g. budget_calls), loaded by path: pytest puts a test
    folder on sys.path only once it collects a test there, and one file may run alone."""
    if name in sys.modules:
        return sys.modules[name]
    path = Path(__file__).resolve().parents[1] / "server" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
