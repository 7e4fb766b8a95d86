"""Faults of issue 19: two servers on one folder (and after kill -9), NaN results, a full disk,
slow clients, and the connection after a 500. Real processes, sockets, SQLite and a tmpfs."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import uvicorn
from hostile_inputs import one_worker

from server.app import _crash, create_app
from server.core.errors import ApiError
from server.core.service import Lens
from server.core.settings import Settings
from server.core.slow_clients import protocol_with_header_timeout
from server.core.store import Store
from tests._support.live import LiveServer

ROOT = Path(__file__).resolve().parents[2]


def serve(data: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "server.cli",
            "serve",
            "--port",
            "0",
            "--workers",
            "0",
            "--data-dir",
            str(data),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        cwd=ROOT,
    )


def wait_started(proc: subprocess.Popen[bytes]) -> None:
    assert proc.stderr is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stderr.readline().decode()
        if "Application startup complete" in line or "Uvicorn running" in line:
            return
        if not line and proc.poll() is not None:
            raise AssertionError("server exited")
    raise AssertionError("server did not start")


def test_a_second_server_is_refused_and_kill_9_releases_the_folder(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = serve(data)
    try:
        wait_started(first)
        staging = data / "tmp" / "0123456789abcdef"
        staging.mkdir()  # an upload of the first server in flight
        second = serve(data)
        _, err = second.communicate(timeout=60)
        assert second.returncode == 2
        assert b"another Straggler Lens server" in err and str(first.pid).encode() in err, err
        assert staging.is_dir()  # the refused server touched nothing
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
    finally:
        if first.poll() is None:
            first.kill()
        if first.stderr:
            first.stderr.close()
    (data / "tmp" / "notes.txt").write_text("not the server's")
    # the dead server's lock went with it: the next store opens and cleans up what it left
    code = "import sys; from server.core.store import Store; Store(sys.argv[1]).open(); print('opened')"
    out = subprocess.run(
        [sys.executable, "-c", code, str(data)],
        capture_output=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )
    assert out.stdout.strip() == b"opened", out.stderr
    assert not staging.exists()  # its leftover staging is cleaned up
    assert (data / "tmp" / "notes.txt").exists()  # but not what the server did not make


def test_two_stores_in_one_process_share_the_lock(tmp_path: Path) -> None:
    a = Store(tmp_path).open()
    b = Store(tmp_path).open()
    b.close()
    a.close()
    code = "import sys; from server.core.store import Store; Store(sys.argv[1]).open(); print('opened')"
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        capture_output=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )
    assert out.stdout.strip() == b"opened", out.stderr


def _null_first_number(doc: object) -> bool:
    """Replace the first float in a JSON document by null (what a NaN serialises to)."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            if isinstance(v, float):
                doc[k] = None
                return True
            if _null_first_number(v):
                return True
    if isinstance(doc, list):
        return any(_null_first_number(v) for v in doc)
    return False


def test_a_result_that_does_not_validate_is_recomputed_and_never_cached(tmp_path: Path) -> None:
    from diagnosers.report import WhatIfReport

    settings = Settings(data_dir=tmp_path, preload_sample=True)
    lens = Lens(settings, Store(tmp_path).open())
    from server.core.runtime import preload_sample

    tid = preload_sample(lens)
    good = lens.result_json("whatif", tid)
    bad = json.loads(good)
    assert _null_first_number(bad)
    lens.store.put_result(tid, "whatif", "", json.dumps(bad))  # a NaN cached by an older version
    fresh = Lens(settings, lens.store)  # nothing in memory: a restart
    assert fresh.whatif(tid).model_dump_json() == WhatIfReport.model_validate_json(good).model_dump_json()
    assert WhatIfReport.model_validate_json(fresh.store.get_result(tid, "whatif", "") or "")
    with pytest.raises(ApiError) as err:
        fresh._cached_model(tid, "scenario", "nan", lambda: json.dumps(bad), WhatIfReport)
    assert err.value.status == 422 and "not a finite number" in err.value.message
    assert fresh.store.get_result(tid, "scenario", "nan") is None


@pytest.fixture
def small_disk(tmp_path: Path):  # type: ignore[no-untyped-def]
    mnt = tmp_path / "disk"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_disk_full_is_507_and_keeps_what_is_stored(small_disk: Path) -> None:
    settings = Settings(data_dir=small_disk / "data", workers=0)
    with LiveServer(settings) as live:
        ok = httpx.post(f"{live.url}/api/traces", files=[("files", ("a.jsonl", one_worker()))])
        assert ok.status_code == 201, ok.text
        big = os.urandom(6 * 1024 * 1024)
        r = httpx.post(f"{live.url}/api/traces", params={"filename": "big.csv"}, content=big, timeout=60)
        assert r.status_code == 507, r.text
        assert "disk is full" in r.json()["error"]["message"]
        assert not any((small_disk / "data" / "tmp").iterdir())  # the partial file is gone
        listing = httpx.get(f"{live.url}/api/traces").json()
        assert [t["trace_id"] for t in listing["items"]] == [ok.json()["trace_id"]]
        assert httpx.get(f"{live.url}/api/traces/{ok.json()['trace_id']}/whatif").status_code == 200


class _Server:
    def __init__(self, settings: Settings):
        config = uvicorn.Config(
            create_app(settings),
            host="127.0.0.1",
            port=0,
            log_level="warning",
            http=protocol_with_header_timeout(settings.header_timeout_s),
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> int:
        self.thread.start()
        while not self.server.started:
            time.sleep(0.02)
        return int(self.server.servers[0].sockets[0].getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


def _recv_all(sock: socket.socket) -> bytes:
    out = b""
    while chunk := sock.recv(65536):
        out += chunk
    return out


def test_slow_headers_and_a_slow_upload_are_dropped(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", workers=0, header_timeout_s=0.5, upload_deadline_s=1.0)
    with _Server(settings) as port:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never finishes its headers
            answer = _recv_all(s)
        assert answer.startswith(b"HTTP/1.1 408"), answer
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(
                b"POST /api/traces?filename=t.jsonl HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Length: 100000\r\n\r\n"
            )
            start = time.monotonic()
            try:
                for _ in range(40):  # a byte every 0.1 s: never idle, never done
                    s.sendall(b"x")
                    time.sleep(0.1)
            except OSError:
                pass
            answer = _recv_all(s)
        assert b" 408 " in answer.split(b"\r\n", 1)[0] and b"longer than 1 s" in answer, answer
        assert time.monotonic() - start < 3.5
        assert not any((tmp_path / "data" / "tmp").iterdir())  # the staging was freed
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200


def test_a_500_says_connection_close() -> None:
    from starlette.requests import Request

    request = Request({"type": "http", "method": "GET", "path": "/x", "headers": [], "query_string": b""})
    response = asyncio.run(_crash(request, RuntimeError("boom")))
    assert response.status_code == 500 and response.headers["connection"] == "close"
    assert b"boom" not in response.body
    full = asyncio.run(_crash(request, OSError(28, "No space left on device")))
    assert full.status_code == 507
