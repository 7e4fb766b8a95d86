"""The event loop stays free while heavy work runs: a watchdog task on the server's own loop
measures its scheduling delay while a tens-of-MB upload streams in over a real socket and the
first diagnosis of that trace runs; a stall of more than a second fails the test.

The latency figure itself (``/healthz`` p50/p99 under a 100 MB upload and a 2M-op diagnosis) is
``bench/loop_latency_bench.py``'s job; this test only guards against the loop being blocked.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import httpx
import pytest
from lens_testing import LiveServer

from server.core.settings import Settings

pytestmark = [pytest.mark.network, pytest.mark.slow]

TICK_S = 0.02
MAX_STALL_S = 1.0


@pytest.fixture(scope="module")
def big_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A synthetic 64 x 4 job in native JSON Lines (about 40 MB, 230k ops, one faulty worker)."""
    from diagnosers.synth import Scenario, ScenarioSpec, generate
    from diagnosers.writers import write_native

    job = generate(
        ScenarioSpec(
            dp=64, pp=4, microbatches=16, steps=10, scenarios=[Scenario.FAULTY_MACHINE], worker=(5, 2)
        )
    )
    path = tmp_path_factory.mktemp("loop") / "trace.jsonl"
    write_native(job.trace, path)
    return path


class Watchdog:
    """A task on ``loop`` that sleeps ``TICK_S`` again and again and records how late it wakes."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.delays: list[float] = []
        self.stop = threading.Event()

    async def _run(self) -> None:
        while not self.stop.is_set():
            start = self.loop.time()
            await asyncio.sleep(TICK_S)
            self.delays.append(self.loop.time() - start - TICK_S)

    def __enter__(self) -> Watchdog:
        self.future = asyncio.run_coroutine_threadsafe(self._run(), self.loop)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.future.result(timeout=10)


def test_the_loop_never_stalls_during_a_large_upload_and_a_first_diagnosis(
    tmp_path: Path, big_trace: Path
) -> None:
    size = big_trace.stat().st_size
    assert size > 20 * 1024 * 1024
    settings = Settings(data_dir=tmp_path / "data", port=0)
    with LiveServer(settings) as live, httpx.Client(base_url=live.url, timeout=300) as client:
        loop = live.server.servers[0].get_loop()
        with Watchdog(loop) as dog:
            with big_trace.open("rb") as fh:
                up = client.post("/api/traces?filename=trace.jsonl", content=fh)
            assert up.status_code == 201, up.text
            tid = up.json()["trace_id"]
            assert up.json()["summary"]["job"]["workers"] == 256
            diag = client.get(f"/api/traces/{tid}/diagnosis")
            assert diag.status_code == 200, diag.text
            assert diag.json()["causes"], "the faulty worker is found"
        assert len(dog.delays) > 20, "the watchdog ran during the work"
        worst = max(dog.delays)
        print(f"loop delay: max {worst:.3f} s over {len(dog.delays)} ticks")
        assert worst < MAX_STALL_S, f"the event loop stalled {worst:.2f} s"
