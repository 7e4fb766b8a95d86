"""Fixtures of the web tests: a real server on loopback and Debian's Chromium through Playwright.

The browser is the system package (``/usr/bin/chromium``, installed by ``.ci/run``); Playwright
never downloads one. A missing Chromium fails the browser tests: it is not a reason to skip.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from server.core.settings import Settings
from tests._support.live import Live, LiveServer

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
