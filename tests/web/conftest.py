"""Fixtures of the web tests: a real server on loopback and Debian's Chromium through Playwright.

The browser is the system package (``/usr/bin/chromium``, installed by ``.ci/run``); Playwright
never downloads one. A missing Chromium fails the browser tests: it is not a reason to skip.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from web_testing import TOKEN

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


@pytest.fixture
def artefacts(tmp_path: Path) -> Path:
    """Where a test writes its screenshots (pytest's tmp path: kept for the last runs)."""
    out = tmp_path / "screenshots"
    out.mkdir()
    return out
