"""The fleet study on Ray: one Ray task per job, a local Ray unless an address is given.

``run_fleet(jobs, out_dir, ...)`` skips jobs whose stored result has the same content hash
(resumable), submits one task per remaining job (at most ``workers`` in flight, so a task's clock
starts when it is submitted), records each answer in ``OUT/jobs/<id>.json`` as it arrives, prints
progress to ``progress`` (stderr in the CLI), and finally writes the fleet table and report.

Each task runs ``server.core.fleet.run_isolated``: the job is analysed in a child process with its
memory limit (``RLIMIT_AS``) and timeout, so a job that overruns either, or crashes, fails alone
and the Ray worker survives. A task whose Ray worker dies is retried by Ray (``max_retries``); a
child that dies without an answer is retried once inside the task. Whatever still fails is a
failed row with its reason; one bad job never stops the batch.

``ray`` is imported only here and only when there is work to submit. A local Ray is started with
loopback-only settings (docs/FLEET.md): the three environment variables below set before import,
no dashboard, a small object store, ``num_cpus = workers``; it is shut down at the end. When Ray is
already initialised in this process (a test's session), that session is used and left running.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from server.core.fleet import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_S, FleetJobSource, ResultStore, content_hash

# Set before ``import ray`` (children inherit them). 2.60 enables token auth by default; the
# Windows/OSX switch is what keeps every Ray socket on 127.0.0.1 on Linux; no usage reporting.
RAY_ENV = {
    "RAY_AUTH_MODE": "disabled",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
}
# The object store holds only the per-job answers (a few KB each); Ray's floor is ~75 MiB.
OBJECT_STORE_MB = 128
# Ray retries a task whose worker process died this many times.
MAX_RETRIES = 3
# The driver's backstop beyond a job's own timeout (the task enforces the timeout itself).
BACKSTOP_GRACE_S = 60.0

Progress = Callable[[str], None]


def import_ray() -> Any:
    """``ray``, with the loopback-only environment set first; a clear error when it is missing."""
    for k, v in RAY_ENV.items():
        os.environ.setdefault(k, v)
    try:
        import ray
    except ModuleNotFoundError:
        raise RuntimeError(
            "the fleet study needs Ray: pip install 'straggler-lens[ray]' (or pip install 'ray>=2.9')"
        ) from None
    return ray


def start_local_ray(workers: int, temp_dir: str | None = None) -> Any:
    """A local Ray for this process: ``workers`` CPUs, no dashboard, a small object store."""
    ray = import_ray()
    kwargs: dict[str, Any] = {
        "num_cpus": workers,
        "include_dashboard": False,
        "log_to_driver": False,
        "object_store_memory": OBJECT_STORE_MB * 1024 * 1024,
        "configure_logging": False,
    }
    if temp_dir:
        kwargs["_temp_dir"] = temp_dir
    ray.init(**kwargs)
    return ray


def fleet_task(job: dict[str, Any], timeout_s: float, memory_mb: int) -> dict[str, Any]:
    """The body of one Ray task: the job in its sandbox, retried once if the sandbox was lost."""
    from server.core.fleet import run_isolated

    result = run_isolated(job, timeout_s, memory_mb)
    if result.get("lost"):
        again = run_isolated(job, timeout_s, memory_mb)
        if again["status"] != "ok":
            again["error"] = f"{again['error']} (after a retry)"
        result = again
        result["retried"] = True
    return result


def _line(done: int, total: int, result: dict[str, Any], started: float, n_done_here: int) -> str:
    if result["status"] == "ok":
        row = result["row"]
        top = row.get("cause_1") or "no cause"
        detail = f"ok S={row['slowdown']:.3f} {top} fidelity={row.get('fidelity')}"
    else:
        detail = f"FAILED {result.get('error')}"
    elapsed = time.perf_counter() - started
    rate = 60.0 * n_done_here / elapsed if elapsed > 0 else 0.0
    took = result.get("seconds", 0.0)
    return f"[{done}/{total}] {result['job_id']}: {detail} ({took:.1f} s; {rate:.1f} jobs/min)"


def run_fleet(
    jobs: Sequence[FleetJobSource],
    out_dir: str | Path,
    *,
    address: str | None = None,
    workers: int | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    memory_mb: int = DEFAULT_MEMORY_MB,
    progress: Progress | None = None,
    ray_temp_dir: str | None = None,
) -> dict[str, Any]:
    """Analyse ``jobs`` on Ray into ``out_dir``; see the module docstring.

    Returns ``{"report": FleetReport, "analysed", "skipped", "failed", "seconds", "jobs_per_minute"}``
    (``jobs_per_minute`` over the jobs run now, excluding Ray's start-up).
    """
    say = progress or (lambda _msg: None)
    store = ResultStore(out_dir)
    results: dict[str, dict[str, Any]] = {}
    todo: list[tuple[FleetJobSource, str]] = []
    for job in jobs:
        digest = content_hash(job)
        prev = store.done(job.job_id, digest)
        if prev is not None:
            results[job.job_id] = prev
        else:
            todo.append((job, digest))
    if results:
        say(f"{len(results)} job(s) already analysed with the same content hash: skipped")
    n_workers = workers or max(1, os.cpu_count() or 1)
    t_run = 0.0
    if todo:
        ray, started_here = _connect(address, n_workers, ray_temp_dir)
        try:
            t0 = time.perf_counter()
            _submit_all(ray, todo, store, results, n_workers, timeout_s, memory_mb, say, len(jobs))
            t_run = time.perf_counter() - t0
        finally:
            if started_here:
                ray.shutdown()
    report = store.write_outputs(results.values(), jobs)
    failed = sum(1 for r in results.values() if r["status"] != "ok")
    say(f"fleet report written to {store.root} ({len(todo)} analysed now, {len(jobs) - len(todo)} skipped, "
        f"{failed} failed)")
    return {
        "report": report,
        "analysed": len(todo),
        "skipped": len(jobs) - len(todo),
        "failed": failed,
        "seconds": t_run,
        "jobs_per_minute": 60.0 * len(todo) / t_run if t_run > 0 else None,
    }


def _connect(address: str | None, workers: int, temp_dir: str | None) -> tuple[Any, bool]:
    ray = import_ray()
    if ray.is_initialized():
        return ray, False
    if address:
        ray.init(address=address, log_to_driver=False, configure_logging=False)
        return ray, True
    return start_local_ray(workers, temp_dir), True


def _submit_all(
    ray: Any,
    todo: Sequence[tuple[FleetJobSource, str]],
    store: ResultStore,
    results: dict[str, dict[str, Any]],
    workers: int,
    timeout_s: float,
    memory_mb: int,
    say: Progress,
    total: int,
) -> None:
    """Keep at most ``workers`` tasks in flight; record each answer (or failure) as it arrives."""
    remote = ray.remote(fleet_task)
    pending = list(todo)
    inflight: dict[Any, tuple[FleetJobSource, str, float]] = {}
    started = time.perf_counter()
    n_here = 0

    def record(job: FleetJobSource, digest: str, result: dict[str, Any]) -> None:
        nonlocal n_here
        result["content_hash"] = digest
        result["job_id"] = job.job_id
        store.save(result)
        results[job.job_id] = result
        n_here += 1
        say(_line(len(results), total, result, started, n_here))

    while pending or inflight:
        while pending and len(inflight) < workers:
            job, digest = pending.pop(0)
            t_job = job.timeout_s or timeout_s
            m_job = job.memory_mb or memory_mb
            ref = remote.options(
                max_retries=MAX_RETRIES, retry_exceptions=False, num_cpus=1, memory=m_job * 1024 * 1024
            ).remote(job.as_dict(), t_job, m_job)
            inflight[ref] = (job, digest, time.monotonic() + t_job + BACKSTOP_GRACE_S)
        ready, _ = ray.wait(list(inflight), num_returns=1, timeout=1.0)
        for ref in ready:
            job, digest, _deadline = inflight.pop(ref)
            try:
                result = ray.get(ref)
            except Exception as exc:  # the worker died MAX_RETRIES + 1 times, or Ray lost the task
                result = {"job_id": job.job_id, "status": "failed",
                          "error": f"Ray worker lost ({type(exc).__name__}) after {MAX_RETRIES} retries"}
            record(job, digest, result)
        now = time.monotonic()
        for ref in [r for r, (_, _, deadline) in inflight.items() if now > deadline]:
            job, digest, _ = inflight.pop(ref)
            ray.cancel(ref, force=True)
            record(job, digest, {"job_id": job.job_id, "status": "failed",
                                 "error": "no answer from its Ray task within the timeout (cancelled)"})
