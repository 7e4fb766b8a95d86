"""Fixtures of the hostile-input tests: a real server on a loopback socket (see tests/server)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from server.core.settings import Settings
from tests._support.live import Live, LiveServer


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


# Hypothesis, bounded for CI: the same examples every run, no example database, no deadline (a
# shared 2-core box); HYPOTHESIS_PROFILE=dev explores more.
settings.register_profile(
    "ci",
    max_examples=30,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile("dev", max_examples=400, deadline=None, database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
