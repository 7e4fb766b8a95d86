"""What every surface needs from the running server: its version, the installed features, the
logger, and ``open_lens`` (store + incident library + executor) with the ``LensHolder`` the MCP
tools read it from. Lives in the core so that no surface imports the app factory.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import anyio

from server.core import jobs
from server.core.executor import Executor, LocalExecutor, ProcessExecutor
from server.core.service import Lens
from server.core.settings import Settings
from server.core.store import open_store

log = logging.getLogger("straggler_lens.server")


def app_version() -> str:
    try:
        return version("straggler-lens")
    except PackageNotFoundError:
        return "0.0.0"


def features() -> dict[str, bool]:
    """Which optional pieces are installed (tools whose module is missing are not offered).
    Looked up once per process: installing a package needs a restart anyway."""
    return dict(_features())


@functools.cache
def _features() -> dict[str, bool]:

    def has(mod: str) -> bool:
        try:
            return importlib.util.find_spec(mod) is not None
        except ModuleNotFoundError:
            return False

    return {
        "whatif": has("diagnosers.whatif"),
        "diagnose": has("diagnosers.diagnose"),
        "heatmap": has("diagnosers.render"),
        "incidents": has("incidents.search") and has("incidents.library"),
        "similar": has("incidents.similar"),
    }


def open_library() -> Any:
    """The incident library, or None when the incidents package is not installed."""
    return jobs.open_library()


def open_executor(settings: Settings, with_library: bool) -> Executor:
    """The executor of a running server: worker processes (one per core by default, each with
    its trace cache and, when the server has one, the incident library), or threads when
    ``settings.workers == 0``; with ``settings.executor == "ray"``, tasks on the Ray cluster at
    ``settings.ray_address`` (a local Ray without one), each Ray worker set up like a process."""
    if settings.executor == "ray":
        from server.core.ray_executor import RayExecutor

        return RayExecutor(
            settings.ray_address,
            settings.workers or None,
            settings.max_queue,
            initializer=jobs.init_worker,
            initargs=(settings.trace_cache_size, with_library),
        )
    if settings.workers == 0:
        return LocalExecutor(max_queue=settings.max_queue)
    pool = ProcessExecutor(
        settings.workers,
        settings.max_queue,
        initializer=jobs.init_worker,
        initargs=(settings.trace_cache_size, with_library),
    )
    pool.warm(jobs.warm, with_library)
    return pool


def preload_sample(lens: Lens) -> str:
    """Store the bundled ST sample (idempotent: the content hash finds it on later starts)."""
    from diagnosers.samples import artifact_trace
    from server.core.staging import UploadBudget, write_bytes

    trace = artifact_trace("ST")
    paths = [trace, trace.with_name("meta-ST.yaml")]
    staging = lens.store.staging_dir()
    budget = UploadBudget(lens.settings.max_upload_bytes, lens.settings.max_decompressed_bytes)
    files = [write_bytes(staging, p.name, p.read_bytes(), budget) for p in paths]
    result = lens.ingest(staging, files, {}, "sample ST (pipeline stage imbalance)")
    return result.trace_id


@asynccontextmanager
async def open_lens(settings: Settings) -> AsyncIterator[Lens]:
    """Open the store, the incident library and the executor; close them on the way out."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    store = open_store(settings.data_dir, settings.database, settings.replica)
    await anyio.to_thread.run_sync(store.open)
    executor: Executor | None = None
    try:
        library = await anyio.to_thread.run_sync(open_library)
        executor = await anyio.to_thread.run_sync(open_executor, settings, library is not None)
        lens = Lens(settings, store, library, executor)
        if settings.preload_sample:
            tid = await anyio.to_thread.run_sync(preload_sample, lens)
            log.info("sample trace ST stored as %s", tid)
        if settings.retention_days is None:
            yield lens
        else:
            from server.core.lifecycle import expire, retention_loop

            # "deleted at start": the first expiry ends before the first request is served, so
            # no listing shows a trace the settings already expired
            await anyio.to_thread.run_sync(expire, lens)
            async with anyio.create_task_group() as tg:
                tg.start_soon(retention_loop, lens)  # then periodically
                yield lens
                tg.cancel_scope.cancel()
    finally:
        if executor is not None:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(executor.close)
        store.close()


class LensHolder:
    """Where the lifespan puts the running ``Lens`` for the MCP tools (built before it opens)."""

    def __init__(self) -> None:
        self.lens: Lens | None = None
        self.monitor: Any = None  # the running server's Monitor (MCP job tools)

    def require(self) -> Lens:
        if self.lens is None:
            raise RuntimeError("the server is not running (lifespan not entered)")
        return self.lens
