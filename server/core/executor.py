"""The seam for heavy work: one interface, ``await executor.submit(fn, *args)``.

``fn`` is a pure, picklable module-level function of a trace reference and options (see
``server.core.jobs``); it returns JSON text or bytes. Where it runs is the executor's business:

- ``ProcessExecutor`` (the server's default): worker processes started by ``forkserver`` (never
  ``fork`` from a threaded server), as many as the machine has cores. Parsing and simulating hold
  the GIL, so threads would not keep the event loop free; processes do.
- ``LocalExecutor``: threads of this process (tests, the CLI, ``--workers 0``); the same bound.
- a cluster implementation (Ray) can go behind the same three methods.

Both bound the heavy work running at once (``workers``) and queue the rest, up to ``max_queue``
waiting jobs; beyond that ``submit`` refuses with a 503 that says to retry. A job that has to wait
says so through its ``progress`` callback (MCP progress), and ``status()`` shows the queue
(``/healthz``). A job whose caller went away still holds its worker until it ends: the bound counts
work, not requests.

The interface::

    async def submit(fn, *args, progress=None, affinity=None) -> result
        progress: (fraction, message) callback; when given, ``fn`` is called with a
                  ``progress=`` keyword valid where it runs. The callback may be called on the
                  event loop thread or on a worker thread of the caller's loop.
        affinity: a key (the trace's content hash) to run jobs of one trace on one worker, whose
                  cache then holds its parsed trace and engine; a hint, never a wait.
    def status() -> dict   # kind, workers, running, queued, max_queue
    def close() -> None    # stop the workers (running jobs end first)
    in_process: bool       # jobs run in this process (the caller may share its caches)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import itertools
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Protocol, TypeVar

import anyio
import anyio.to_thread

from server.core.errors import ApiError

R = TypeVar("R")
Progress = Callable[[float, str], None]


class Executor(Protocol):
    """Where heavy jobs run (see the module docstring)."""

    in_process: bool

    async def submit(
        self,
        fn: Callable[..., R],
        *args: Any,
        progress: Progress | None = None,
        affinity: str | None = None,
    ) -> R: ...

    def status(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


def machine_workers() -> int:
    """Worker count sized to the machine: the cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


class Admission:
    """At most ``slots`` jobs at once, at most ``max_queue`` waiting; the loop-side bookkeeping."""

    def __init__(self, slots: int, max_queue: int):
        self.slots, self.max_queue = slots, max_queue
        self.running = 0
        self.queued = 0
        self._free: asyncio.Condition | None = None

    def _cond(self) -> asyncio.Condition:
        if self._free is None:
            self._free = asyncio.Condition()
        return self._free

    async def acquire(self, progress: Progress | None) -> None:
        cond = self._cond()
        async with cond:
            if self.running < self.slots and self.queued == 0:
                self.running += 1
                return
            if self.queued >= self.max_queue:
                raise ApiError(
                    503,
                    "busy",
                    f"the server is busy: {self.running} analyses running and {self.queued} waiting; "
                    "retry in a few seconds",
                    {"Retry-After": "5"},
                )
            if progress is not None:
                progress(0.0, f"queued: {self.running} analyses running, {self.queued} ahead of this one")
            self.queued += 1
            try:
                await cond.wait_for(lambda: self.running < self.slots)
            finally:
                self.queued -= 1
            self.running += 1

    def release(self) -> None:
        """Free a slot; callable on the loop thread only (see ``release_soon``)."""
        cond = self._cond()
        self.running -= 1

        async def wake() -> None:
            async with cond:
                cond.notify(1)

        task = asyncio.ensure_future(wake())
        _keep(task)

    def status(self) -> dict[str, int]:
        return {
            "workers": self.slots,
            "running": self.running,
            "queued": self.queued,
            "max_queue": self.max_queue,
        }


_TASKS: set[asyncio.Future[Any]] = set()


def _keep(task: asyncio.Future[Any]) -> None:
    _TASKS.add(task)
    task.add_done_callback(_TASKS.discard)


class LocalExecutor:
    """Jobs run in threads of this process, ``workers`` at a time (their own thread limiter, so a
    crowd of waiting requests never starves them)."""

    in_process = True

    def __init__(self, workers: int | None = None, max_queue: int = 64):
        self.workers = workers or machine_workers()
        self.admission = Admission(self.workers, max_queue)
        self._limiter: anyio.CapacityLimiter | None = None

    async def submit(
        self,
        fn: Callable[..., R],
        *args: Any,
        progress: Progress | None = None,
        affinity: str | None = None,
    ) -> R:
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(self.workers)
        await self.admission.acquire(progress)
        try:
            kw = {"progress": progress} if progress is not None else {}
            return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kw), limiter=self._limiter)
        finally:
            self.admission.release()

    def status(self) -> dict[str, Any]:
        return {"kind": "local", **self.admission.status()}

    def close(self) -> None:
        pass


# -- worker process side -------------------------------------------------------------------------

_EVENTS: Any = None
# a worker sends at most one progress event per job and interval (the engine may report often)
PROGRESS_INTERVAL_S = 0.1


# Workers run at a lower CPU priority than the server process: on a machine with fewer free cores
# than runnable processes, the event loop (short, latency-bound work) goes first and the heavy
# jobs (long, throughput-bound) take the rest.
WORKER_NICE = 5


def _init_process(events: Any, init: Callable[..., Any] | None, init_args: tuple[Any, ...]) -> None:
    global _EVENTS
    _EVENTS = events
    with contextlib.suppress(OSError):  # not permitted here: same priority, still off the loop
        os.nice(WORKER_NICE)
    if init is not None:
        init(*init_args)


def _run_job(job_id: int, want_progress: bool, fn: Callable[..., R], args: tuple[Any, ...]) -> R:
    if not want_progress:
        return fn(*args)
    last = [0.0]

    def progress(fraction: float, message: str = "") -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_INTERVAL_S or fraction >= 1.0:
            last[0] = now
            _EVENTS.put((job_id, float(fraction), str(message)))

    return fn(*args, progress=progress)


class ProcessExecutor:
    """Jobs run in worker processes: one single-process pool per worker, so that ``affinity``
    can send a trace's jobs to the worker that has it parsed."""

    in_process = False

    def __init__(
        self,
        workers: int | None = None,
        max_queue: int = 64,
        *,
        initializer: Callable[..., Any] | None = None,
        initargs: tuple[Any, ...] = (),
        start_method: str = "forkserver",
        preload: tuple[str, ...] = ("server.core.jobs",),
    ):
        self.workers = workers or machine_workers()
        self.admission = Admission(self.workers, max_queue)
        self._mp = multiprocessing.get_context(start_method)
        if start_method == "forkserver" and preload:
            self._mp.set_forkserver_preload(list(preload))
        self._init = (initializer, initargs)
        self._events = self._mp.Queue()
        self._pools = [self._new_pool() for _ in range(self.workers)]
        self._busy = [False] * self.workers
        self._listeners: dict[int, Callable[[float, str], None]] = {}
        self._ids = itertools.count()
        self._reader = threading.Thread(target=self._read_events, name="executor-progress", daemon=True)
        self._reader.start()

    def _new_pool(self) -> concurrent.futures.ProcessPoolExecutor:
        init, args = self._init
        return concurrent.futures.ProcessPoolExecutor(
            max_workers=1, mp_context=self._mp, initializer=_init_process, initargs=(self._events, init, args)
        )

    def _read_events(self) -> None:
        while True:
            try:
                item = self._events.get()
            except (EOFError, OSError):
                return
            if item is None:
                return
            job_id, fraction, message = item
            listener = self._listeners.get(job_id)
            if listener is not None:
                listener(fraction, message)

    def warm(self, fn: Callable[..., Any], *args: Any) -> None:
        """Start every worker now, running ``fn(*args)`` there (imports, library), without waiting."""
        for pool in self._pools:
            pool.submit(fn, *args)

    def _pick(self, affinity: str | None) -> int:
        if affinity is not None:
            preferred = hash(affinity) % self.workers
            if not self._busy[preferred]:
                return preferred
        return self._busy.index(False)

    async def submit(
        self,
        fn: Callable[..., R],
        *args: Any,
        progress: Progress | None = None,
        affinity: str | None = None,
    ) -> R:
        await self.admission.acquire(progress)
        slot = self._pick(affinity)
        self._busy[slot] = True
        loop = asyncio.get_running_loop()
        job_id = next(self._ids)
        if progress is not None:
            relay = progress

            def listener(fraction: float, message: str) -> None:
                loop.call_soon_threadsafe(relay, fraction, message)

            self._listeners[job_id] = listener

        def finished(_: Any = None) -> None:
            self._busy[slot] = False
            self._listeners.pop(job_id, None)
            self.admission.release()

        try:
            future = self._pools[slot].submit(_run_job, job_id, progress is not None, fn, args)
        except BaseException:
            finished()
            raise
        try:
            return await asyncio.wrap_future(future)
        except BrokenProcessPool:
            # the worker died (killed, out of memory): a fresh one takes its place
            self._pools[slot] = self._new_pool()
            raise ApiError(
                503, "worker_lost", "the analysis worker stopped (out of memory?); retry the request"
            ) from None
        finally:
            if future.done():
                finished()
            else:  # the caller went away: the slot stays taken until the job really ends
                future.add_done_callback(lambda _: loop.call_soon_threadsafe(finished))

    def status(self) -> dict[str, Any]:
        return {"kind": "process", **self.admission.status()}

    def close(self) -> None:
        for pool in self._pools:
            pool.shutdown(wait=True, cancel_futures=True)
        self._events.put(None)
        self._reader.join(timeout=5)
        self._events.close()
        self._events.join_thread()
