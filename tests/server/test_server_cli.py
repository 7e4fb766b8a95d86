"""``straggler-lens serve`` as a user runs it (the README's main job is ``serve --preload-sample``)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from lens_testing import TOKEN


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(log: Path, *args: str) -> subprocess.Popen[str]:
    with open(log, "w") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "server.cli", "serve", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )


def wait_healthy(
    url: str, proc: subprocess.Popen[str], headers: dict[str, str] | None = None
) -> httpx.Response:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited with {proc.returncode}")
        try:
            return httpx.get(f"{url}/healthz", headers=headers, timeout=2)
        except httpx.TransportError:
            time.sleep(0.2)
    raise AssertionError("server did not come up")


def stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.mark.network
def test_serve_preload_sample_shows_a_trace_at_once(tmp_path: Path) -> None:
    port = free_port()
    proc = serve(
        tmp_path / "log", "--port", str(port), "--data-dir", str(tmp_path / "data"), "--preload-sample"
    )
    try:
        r = wait_healthy(f"http://127.0.0.1:{port}", proc)
        assert r.status_code == 200 and r.json()["traces"] == 1
        items = httpx.get(f"http://127.0.0.1:{port}/api/traces").json()["items"]
        assert items[0]["summary"]["job"]["trial_name"] == "ST"
    finally:
        stop(proc)
    assert proc.returncode == 0


@pytest.mark.network
def test_serve_with_token_file_refuses_anonymous_requests(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    port = free_port()
    proc = serve(
        tmp_path / "log",
        "--port",
        str(port),
        "--data-dir",
        str(tmp_path / "data"),
        "--token-file",
        str(token_file),
    )
    try:
        assert wait_healthy(f"http://127.0.0.1:{port}", proc).status_code == 401
        ok = httpx.get(f"http://127.0.0.1:{port}/healthz", headers={"Authorization": f"Bearer {TOKEN}"})
        assert ok.status_code == 200
    finally:
        stop(proc)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--host", "0.0.0.0", "--allowed-host", "lens.example"], "--token-file"),
        (["--host", "0.0.0.0"], "--allowed-host"),
        (["--allow-dir", "/no/such/folder"], "--allow-dir"),
        (["--token-file", "/no/such/token"], "--token-file"),
    ],
)
def test_serve_refuses_unsafe_or_broken_settings(tmp_path: Path, args: list[str], message: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "server.cli", "serve", "--data-dir", str(tmp_path), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert message in proc.stderr


def test_serve_says_why_it_cannot_start_instead_of_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from server.cli import main

    # a port another process listens on: refused before the store is opened
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["serve", "--port", str(port), "--data-dir", str(tmp_path / "d1")]) == 2
    err = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{port}" in err and "Traceback" not in err
    # a data folder that cannot be created (its parent is a file)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["serve", "--port", "0", "--data-dir", str(blocker / "data")]) == 2
    assert f"cannot use --data-dir {blocker / 'data'}" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["serve", "--port", "99999"])
    assert exc.value.code == 2
    assert "argument --port: expected a port number 0-65535, got 99999" in capsys.readouterr().err
