"""Heavy jobs on a Ray cluster, behind the same ``Executor`` interface as the process pool.

``serve --executor ray --ray-address ADDR`` connects to a running cluster (``host:port`` of its
head, ``ray://host:10001`` for Ray Client, or ``auto``); without an address a Ray instance local
to this machine is started (loopback only) and stopped with the server. Ray is imported here
only, when this executor is chosen, so the server without the ``ray`` extra never loads it.

A job is one Ray task running the same pure function of ``server.core.jobs`` as a worker
process would: it reads the trace's files by path, so every node must see the data folder at
the same path (a shared mount) and have this package installed. Each Ray worker keeps its own
``JobContext`` (parsed traces, engines), set up once per worker process. The event loop awaits
the task's future and is never blocked; at most ``workers`` tasks run at once (default: the
cluster's CPUs), up to ``max_queue`` wait, and beyond that ``submit`` answers 503 like the pool.

Errors: a reader rejection (``ApiError``) is carried back as data and raised again here with its
status and message; a task whose worker died is retried once by Ray, then answered as a 503
``worker_lost``. Progress: the caller hears "queued"/"sent to the Ray cluster" and the end; the
steps inside a task are not relayed.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any, TypeVar

from server.core.errors import ApiError
from server.core.executor import Admission, Progress

R = TypeVar("R")

# the env a loopback-only local instance needs (see the module docstring); a cluster's own
# settings win, since these are only defaults
LOCAL_RAY_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # bind and advertise 127.0.0.1 only
    "RAY_USAGE_STATS_ENABLED": "0",
}

_READY: dict[str, bool] = {}


def _ray_task(
    fn: Callable[..., Any], args: tuple[Any, ...], init: Callable[..., Any] | None, init_args: tuple[Any, ...]
) -> tuple[str, Any]:
    """Runs in a Ray worker: set the worker up once, run ``fn(*args)``; ``("ok", result)`` or
    ``("api_error", (status, code, message, headers))`` for a rejection the caller should see."""
    if init is not None and not _READY.get("init"):
        init(*init_args)
        _READY["init"] = True
    try:
        return "ok", fn(*args)
    except ApiError as exc:
        return "api_error", (exc.status, exc.code, exc.message, dict(exc.headers or {}))


class RayExecutor:
    """Jobs run as Ray tasks (see the module docstring)."""

    in_process = False

    def __init__(
        self,
        address: str | None = None,
        workers: int | None = None,
        max_queue: int = 64,
        *,
        initializer: Callable[..., Any] | None = None,
        initargs: tuple[Any, ...] = (),
        num_cpus: int | None = None,
    ):
        try:
            import ray
        except ImportError as exc:
            raise RuntimeError("--executor ray needs Ray: pip install 'straggler-lens[ray]'") from exc
        self._ray = ray
        self._owns = False
        if not ray.is_initialized():
            kw: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if address:
                kw["address"] = address
            else:
                for k, v in LOCAL_RAY_ENV.items():
                    os.environ.setdefault(k, v)
                kw["num_cpus"] = num_cpus
                kw["object_store_memory"] = 256 * 1024**2
            ray.init(**kw)
            self._owns = True
        self.address = address or "local"
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.workers = workers or max(1, cpus)
        self.admission = Admission(self.workers, max_queue)
        self._init = (initializer, initargs)
        self._remote = ray.remote(max_retries=1)(_ray_task)
        self.done = 0
        self.failed = 0

    async def submit(
        self,
        fn: Callable[..., R],
        *args: Any,
        progress: Progress | None = None,
        affinity: str | None = None,
    ) -> R:
        """Run ``fn(*args)`` as one Ray task; ``affinity`` is ignored (Ray places tasks)."""
        from ray.exceptions import RayError

        await self.admission.acquire(progress)
        try:
            if progress is not None:
                progress(0.0, f"sent to the Ray cluster ({self.address})")
            ref = self._remote.remote(fn, args, *self._init)
            try:
                kind, value = await asyncio.wrap_future(ref.future())
            except RayError as exc:
                self.failed += 1
                name = type(exc).__name__
                raise ApiError(
                    503, "worker_lost", f"the analysis task failed on the Ray cluster ({name}); retry"
                ) from None
            except asyncio.CancelledError:
                self._ray.cancel(ref, force=True)
                raise
            if kind == "api_error":
                self.failed += 1
                status, code, message, headers = value
                raise ApiError(status, code, message, headers or None)
            self.done += 1
            if progress is not None:
                progress(1.0, "done")
            result: R = value
            return result
        finally:
            self.admission.release()

    def status(self) -> dict[str, Any]:
        return {
            "kind": "ray",
            "address": self.address,
            "done": self.done,
            "failed": self.failed,
            **self.admission.status(),
        }

    def close(self) -> None:
        """Disconnect; a Ray instance this executor started is stopped with it."""
        if self._owns and self._ray.is_initialized():
            self._ray.shutdown()
