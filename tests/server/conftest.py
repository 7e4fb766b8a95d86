"""Fixtures of the server tests: real folders, real SQLite, real sockets.

``live_server`` runs uvicorn on an ephemeral loopback port in a thread; it is module-scoped so a
test module pays for one server start, and each module gets its own data folder.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from lens_testing import TOKEN, Live, LiveServer

from diagnosers.samples import artifact_trace
from server.core.settings import Settings


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def st_files() -> list[Path]:
    """The bundled ST sample: the parquet trace and its meta yaml."""
    trace = artifact_trace("ST")
    return [trace, trace.with_name("meta-ST.yaml")]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """One open server per test module (no token), the ST sample preloaded."""
    data = tmp_path_factory.mktemp("lens-data")
    allow = tmp_path_factory.mktemp("allowed")
    settings = Settings(data_dir=data, allow_dirs=(allow.resolve(),), preload_sample=True)
    with LiveServer(settings) as server:
        yield server


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """A server that requires the bearer token, with a small upload cap (1 MiB, 4 MiB expanded)."""
    data = tmp_path_factory.mktemp("lens-secured")
    allow = tmp_path_factory.mktemp("allowed-secured")
    settings = Settings(
        data_dir=data,
        token=TOKEN,
        allow_dirs=(allow.resolve(),),
        max_upload_bytes=1024 * 1024,
        max_decompressed_bytes=4 * 1024 * 1024,
        preload_sample=True,
    )
    with LiveServer(settings) as server:
        yield server
