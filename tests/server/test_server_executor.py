"""The executor seam: real worker processes run jobs, relay progress and carry errors back; the
bound on running jobs queues the rest, says so, and refuses beyond the queue."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from diagnosers.samples import artifact_trace
from server.core import jobs
from server.core.errors import ApiError
from server.core.executor import LocalExecutor, ProcessExecutor


def st_ref() -> jobs.TraceRef:
    trace = artifact_trace("ST")
    return jobs.TraceRef.of("st", [trace, trace.with_name("meta-ST.yaml")], {}, trace.parent)


def test_worker_processes_run_jobs_relay_progress_and_return_errors(tmp_path: Path) -> None:
    pool = ProcessExecutor(2, 4, initializer=jobs.init_worker, initargs=(2, False))
    seen: list[tuple[float, str]] = []
    missing = jobs.TraceRef.of("nope", [tmp_path / "gone.parquet"], {}, tmp_path)

    async def main() -> tuple[str, str]:
        report = await pool.submit(jobs.whatif_json, st_ref(), progress=lambda f, m: seen.append((f, m)))
        again = await pool.submit(jobs.whatif_json, st_ref(), affinity="st")
        with pytest.raises(ApiError) as err:
            await pool.submit(jobs.traced_steps, missing)
        assert err.value.status == 422 and "gone.parquet" in err.value.message
        assert str(tmp_path) not in err.value.message
        return report, again

    try:
        report, again = anyio.run(main)
    finally:
        pool.close()
    assert report == again and '"slowdown"' in report
    assert seen and all(0.0 <= f <= 1.0 for f, _ in seen), "the engine's progress crossed over"
    assert pool.status() == {"kind": "process", "workers": 2, "running": 0, "queued": 0, "max_queue": 4}


def wait_for(event: threading.Event, progress: Any = None) -> str:
    assert event.wait(30)
    return "done"


def test_the_bound_queues_then_refuses_and_a_waiting_job_says_so() -> None:
    ex = LocalExecutor(workers=1, max_queue=1)
    release = threading.Event()
    messages: list[str] = []
    results: list[Any] = []

    async def main() -> None:
        async with anyio.create_task_group() as tg:

            async def job(progress: Any = None) -> None:
                results.append(await ex.submit(wait_for, release, progress=progress))

            tg.start_soon(job)
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(job, lambda f, m: messages.append(m))
            await anyio.wait_all_tasks_blocked()
            assert ex.status()["running"] == 1 and ex.status()["queued"] == 1
            with pytest.raises(ApiError) as err:
                await ex.submit(wait_for, release)
            assert err.value.status == 503 and err.value.headers.get("Retry-After")
            release.set()

    anyio.run(main)
    assert results == ["done", "done"]
    assert messages and messages[0].startswith("queued: 1 analyses running")
    assert ex.status()["running"] == 0 and ex.status()["queued"] == 0
