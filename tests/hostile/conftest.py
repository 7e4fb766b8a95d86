"""Fixtures of the hostile-input tests: a real server on a loopback socket (see tests/server)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "server"))

from lens_testing import Live, LiveServer  # noqa: E402

from server.core.settings import Settings  # noqa: E402


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """One server per module (threads for heavy work), the ST sample preloaded."""
    data = tmp_path_factory.mktemp("hostile-data")
    settings = Settings(data_dir=data, preload_sample=True, workers=0)
    with LiveServer(settings) as server:
        yield server
