"""Fixtures of the web tests: a real server on loopback and Debian's Chromium through Playwright.

The browser is the system package (``/usr/bin/chromium``, installed by ``.ci/run``); Playwright
never downloads one. A missing Chromium fails the browser tests: it is not a reason to skip.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from server.app import create_app
from server.core.settings import Settings

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
TOKEN = "web-test-token-0123456789"


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    """pytest-playwright's hook: launch the system Chromium, never a downloaded one."""
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_ARGS}


@dataclass
class Live:
    url: str
    settings: Settings


class LiveServer:
    """uvicorn in a background thread on 127.0.0.1:<free port>; stops on exit."""

    def __init__(self, settings: Settings):
        self.settings = settings
        config = uvicorn.Config(create_app(settings), host="127.0.0.1", port=0, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Live:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("server did not start")
            time.sleep(0.02)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return Live(f"http://127.0.0.1:{port}", self.settings)

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """An open server (no token) with the ST sample stored; jobs run in threads of the server."""
    settings = Settings(data_dir=tmp_path_factory.mktemp("web-data"), preload_sample=True, workers=0)
    with LiveServer(settings) as server:
        yield server


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("web-secured"), token=TOKEN, preload_sample=True, workers=0
    )
    with LiveServer(settings) as server:
        yield server


def native_trace(dp: int = 2, steps: int = 4, slow_dp: int = 1) -> bytes:
    """A small native JSON Lines trace: ``dp`` x 1 workers, DP rank ``slow_dp`` computing 1.6x longer."""
    header = {
        "format": "straggler-lens/native",
        "version": 1,
        "job": {"dp_size": dp, "pp_size": 1, "trial_name": "web"},
    }
    lines = [json.dumps(header)]
    for step in range(steps):
        for d in range(dp):
            k = 1.6 if d == slow_dp else 1.0
            t = step * 0.2
            for optype, start, dur in (
                ("forward-compute", 0.0, 0.010 * k),
                ("backward-compute", 0.03, 0.020 * k),
            ):
                lines.append(
                    json.dumps(
                        {
                            "dp_rank": d,
                            "stage": 0,
                            "rank": d,
                            "step": step,
                            "optype": optype,
                            "start_ts": t + start,
                            "duration": dur,
                            "seq_id": 0,
                            "mc": 0,
                            "gmc": 0,
                            "mb_id": 0,
                        }
                    )
                )
    return ("\n".join(lines) + "\n").encode()


@pytest.fixture
def artefacts(tmp_path: Path) -> Path:
    """Where a test writes its screenshots (pytest's tmp path: kept for the last runs)."""
    out = tmp_path / "screenshots"
    out.mkdir()
    return out
