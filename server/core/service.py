"""The glue between the surfaces and the packages that do the work.

``Lens`` holds the store, the incident library, the executor and a memo of result models. Its
methods are synchronous (surfaces call them in worker threads), raise ``ApiError`` for anything a
caller can fix, and hand every heavy step (parse, analyse, diagnose, draw) to the executor as a
job of ``server.core.jobs``: no analysis logic lives here. Results come back as JSON, are cached in
the store (so they survive restarts) and memoised as models; one lock per result makes concurrent
callers wait for a single computation instead of repeating it.

Without an executor (tests, scripts) the jobs run in the calling thread, sharing this Lens's own
trace cache; with an in-process executor they share it too; worker processes keep their own.
"""

from __future__ import annotations

import base64
import json
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import anyio.from_thread

from diagnosers.model import Trace
from server.core import faults, jobs
from server.core.archives import expand_archives
from server.core.errors import ApiError, not_found
from server.core.executor import Executor
from server.core.jobs import READ_KEYS, JobContext, TraceRef, read_options, trace_error
from server.core.models import TraceInfo, TraceSummary, UploadResult
from server.core.settings import Settings
from server.core.staging import META_SUFFIXES, StagedFile, UploadBudget, content_hash
from server.core.store import TraceRecord, TraceStore

__all__ = ["READ_KEYS", "Lens", "check_selector", "read_options", "scaled", "shown_steps", "trace_error"]

R = TypeVar("R")
# progress(fraction in [0, 1], message): called on the event loop or a worker thread.
Progress = Callable[[float, str], None]


def scaled(progress: Progress | None, lo: float, hi: float) -> Progress | None:
    """Map a sub-task's fractions [0, 1] onto [lo, hi] of the caller's progress."""
    if progress is None:
        return None
    outer = progress

    def inner(fraction: float, message: str) -> None:
        outer(lo + (hi - lo) * fraction, message)

    return inner


def shown_steps(steps: list[int], most: int = 20) -> str:
    """``23, 25, 33 ...``: the first ``most`` step ids of a trace, for error messages."""
    return ", ".join(str(s) for s in steps[:most]) + (" ..." if len(steps) > most else "")


def check_shape(dp: int, pp: int, steps: list[int], selector: dict[str, Any]) -> None:
    """A 400 for scenario selectors naming ranks or steps the job does not have: the engine
    would select no op and answer a speedup of 1.0, which reads like a real result."""
    for key, size, name in (("dp_ranks", dp, "dp"), ("pp_ranks", pp, "pp")):
        bad = sorted({int(r) for r in selector.get(key) or [] if not 0 <= int(r) < size})
        if bad:
            raise ApiError(
                400,
                "bad_scenario",
                f"{key} {bad} outside the job: its {name} size is {size} (ranks 0-{size - 1})",
            )
    missing = sorted(set(selector.get("steps") or []) - set(steps))
    if missing:
        raise ApiError(
            400, "bad_scenario", f"steps {missing} are not traced; traced steps: {shown_steps(steps)}"
        )


def check_selector(trace: Trace, selector: dict[str, Any]) -> None:
    """``check_shape`` against a parsed trace."""
    check_shape(trace.meta.dp, trace.meta.pp, list(trace.steps), selector)


def invalid_fields(exc: Any, most: int = 3) -> str:
    """The first few fields a result failed validation on, for the error message."""
    errs = exc.errors()
    shown = ", ".join(".".join(str(x) for x in e["loc"]) for e in errs[:most])
    return shown + (f" (+{len(errs) - most} more)" if len(errs) > most else "")


class Lens:
    """Application state shared by REST routes and MCP tools (one per running server)."""

    def __init__(
        self, settings: Settings, store: TraceStore, library: Any = None, executor: Executor | None = None
    ):
        self.settings = settings
        self.store = store
        self.library = library
        self.executor = executor
        # parsed traces and engines of the jobs that run in this process
        self.jobs = JobContext(size=settings.trace_cache_size, library=library)
        self._cache_lock = threading.Lock()
        # weak values: a lock lives while a caller holds or waits on it, so one per scenario
        # selector ever asked does not pile up for the server's lifetime
        self._locks: weakref.WeakValueDictionary[tuple[str, ...], threading.Lock] = (
            weakref.WeakValueDictionary()
        )
        self._memo: OrderedDict[tuple[str, ...], Any] = OrderedDict()
        self._locks_lock = threading.Lock()

    # -- locks and caches ----------------------------------------------------------------------

    def _lock_for(self, *key: str) -> threading.Lock:
        with self._locks_lock:
            return self._locks.setdefault(key, threading.Lock())

    def run(
        self,
        fn: Callable[..., R],
        *args: Any,
        progress: Progress | None = None,
        affinity: str | None = None,
    ) -> R:
        """Run the job ``fn(*args)`` on the executor and wait for its result (from a worker
        thread of the event loop); in this thread when the Lens has no executor."""
        kw: dict[str, Any] = {"progress": progress} if progress is not None else {}
        try:
            if self.executor is None:
                return fn(*args, ctx=self.jobs, **kw)
            if self.executor.in_process:
                fn = partial(fn, ctx=self.jobs)
            submit = partial(self.executor.submit, fn, *args, progress=progress, affinity=affinity)
            result: R = anyio.from_thread.run(submit)
            return result
        except ApiError:
            raise
        except Exception as exc:  # overflow in an analysis, a full disk: the one mapping
            mapped = faults.api_error(exc)
            if mapped is None:
                raise
            raise mapped from exc

    def ref(self, rec: TraceRecord) -> TraceRef:
        """The job-side handle of a stored trace: its files, read options and content hash."""
        folder = self.store.traces_dir / rec.id
        limits = self.settings.read_limits()
        return TraceRef.of(rec.content_hash, self.store.file_paths(rec), rec.options, folder, limits)

    def peek(self, *key: str) -> Any:
        """A parsed result or view already in memory, else None. Cheap enough for the event loop:
        hot reads skip the worker threads, whose GIL hand-offs dominate latency under load."""
        with self._cache_lock:
            value = self._memo.get(key)
            if value is not None:
                self._memo.move_to_end(key)
            return value

    def memo(self, key: tuple[str, ...], value: Any) -> Any:
        """Keep ``value`` in memory for :meth:`peek` and return it; beyond 64 entries per cached
        trace the least recently used are dropped."""
        with self._cache_lock:
            self._memo[key] = value
            self._memo.move_to_end(key)
            while len(self._memo) > 64 * max(1, self.settings.trace_cache_size):
                self._memo.popitem(last=False)
        return value

    def result_json(self, kind: str, trace_id: str) -> str:
        """The cached JSON document of a result (computing it first when needed), for REST."""
        body = self.peek("json", kind, trace_id)
        if body is None:
            getattr(self, kind)(trace_id)
            body = self.store.get_result(trace_id, kind, "")
            assert body is not None
            self.memo(("json", kind, trace_id), body)
        return str(body)

    # -- traces --------------------------------------------------------------------------------

    def record(self, trace_id: str) -> TraceRecord:
        """The stored record of a trace id; a 404 that says how to find or upload one otherwise."""
        rec = self.store.get(trace_id)
        if rec is None:
            raise not_found(
                "trace",
                trace_id,
                "list stored traces with list_traces / GET /api/traces, "
                "or upload one with upload_trace / POST /api/traces",
            )
        return rec

    def info(self, rec: TraceRecord) -> TraceInfo:
        """What the API shows about a stored trace: name, size, summary and cached result kinds."""
        return TraceInfo(
            trace_id=rec.id,
            name=rec.name,
            created_at=rec.created_at,
            size_bytes=rec.size_bytes,
            summary=TraceSummary.model_validate(rec.summary),
            cached=sorted(self.store.cached_kinds(rec.id)),
        )

    def ingest(
        self, staging: Path, files: list[StagedFile], options: dict[str, Any], name: str
    ) -> UploadResult:
        """Parse a staged upload and store it, or answer the stored twin of the same content.

        The staging folder is always consumed: moved into the store or deleted.
        """
        try:
            files = expand_archives(staging, files, self._budget(files))
            if all(f.name.lower().endswith(META_SUFFIXES) for f in files):
                raise ApiError(400, "no_trace_files", "the upload holds only meta yaml files, no trace")
            opts = {k: options.get(k) for k in (*READ_KEYS, "partial") if options.get(k) is not None}
            chash = content_hash(files, opts)
            existing = self.store.find_by_hash(chash)
            if existing is not None:
                self.store.discard(staging)
                return UploadResult(
                    trace_id=existing.id, created=False, summary=TraceSummary.model_validate(existing.summary)
                )
            names = sorted(f.name for f in files)
            # inner compression layers share the budget the upload's outer gzip started on
            limits = self.settings.read_limits(sum(f.size for f in files))
            ref = TraceRef.of(chash, [staging / n for n in names], opts, staging, limits)
            summary = self.run(jobs.parse_upload, ref, names, affinity=chash)
            rec, created = self.store.commit_trace(
                staging,
                content_hash=chash,
                name=name,
                files=names,
                options=opts,
                summary=summary,
            )
        except BaseException:
            self.store.discard(staging)
            raise
        return UploadResult(
            trace_id=rec.id, created=created, summary=TraceSummary.model_validate(rec.summary)
        )

    def delete(self, trace_id: str) -> None:
        """Delete a stored trace and everything cached about it (404 when unknown)."""
        self.record(trace_id)  # the usual 404 wording for an unknown id
        if not self.store.delete(trace_id):
            raise not_found("trace", trace_id)
        self.forget(trace_id)

    def forget(self, trace_id: str) -> None:
        """Drop the memoised results of a trace (after it was deleted)."""
        with self._cache_lock:
            for key in [k for k in self._memo if trace_id in k]:
                del self._memo[key]

    def _budget(self, files: list[StagedFile]) -> UploadBudget:
        """The decompressed budget left to unpack archives among ``files``."""
        budget = UploadBudget(self.settings.max_upload_bytes, self.settings.max_decompressed_bytes)
        budget.expanded = sum(f.size for f in files)
        return budget

    def trace(self, rec: TraceRecord) -> Trace:
        """The parsed trace of a record in this process (cached; scripts and tests)."""
        return self.jobs.trace(self.ref(rec))

    def engine(self, rec: TraceRecord) -> Any:
        """The what-if engine of a record in this process (cached beside the trace)."""
        return self.jobs.engine(self.ref(rec))

    # -- analyses ------------------------------------------------------------------------------

    def _cached(self, trace_id: str, kind: str, key: str, compute: Callable[[], str]) -> str:
        body = self.store.get_result(trace_id, kind, key)
        if body is not None:
            return body
        with self._lock_for(kind, trace_id, key):
            body = self.store.get_result(trace_id, kind, key)
            if body is None:
                body = compute()
                self.store.put_result(trace_id, kind, key, body)
            return body

    def _result(
        self,
        kind: str,
        trace_id: str,
        key: str,
        compute: Callable[[], str],
        model: Any,
        check: Callable[[], None] | None = None,
    ) -> Any:
        """A result model from memory, else from the store, else ``compute()``d once (a job that
        answers JSON, which is stored so it survives restarts). ``check`` runs before the store
        is asked, so a stored result never answers a request it refuses."""
        memo_key = (kind, trace_id, key) if key else (kind, trace_id)
        hit = self.peek(*memo_key)
        if hit is not None:
            return hit
        if check is not None:
            check()
        return self.memo(memo_key, self._cached_model(trace_id, kind, key, compute, model))

    def _cached_model(
        self, trace_id: str, kind: str, key: str, compute: Callable[[], str], model: Any
    ) -> Any:
        """The validated model of a stored result, recomputed when the stored body does not
        validate (a NaN cached by an older version answers null where a number belongs); a
        freshly computed body that does not validate is refused and never stored."""
        from pydantic import ValidationError

        def parsed(body: str | None) -> Any:
            if body is None:
                return None
            try:
                return model.model_validate_json(body)
            except ValidationError:
                return None

        hit = parsed(self.store.get_result(trace_id, kind, key))
        if hit is not None:
            return hit
        with self._lock_for(kind, trace_id, key):
            hit = parsed(self.store.get_result(trace_id, kind, key))
            if hit is not None:
                return hit
            body = compute()
            try:
                value = model.model_validate_json(body)
            except ValidationError as exc:
                raise ApiError(
                    422,
                    "result_invalid",
                    f"the {kind} of this trace holds a value that is not a finite number (NaN or inf) "
                    f"and was not stored: {invalid_fields(exc)}; check the trace's times",
                ) from exc
            self.store.put_result(trace_id, kind, key, body)
            return value

    def whatif(self, trace_id: str, progress: Progress | None = None) -> Any:
        """The standard what-if report (``diagnosers.whatif.analyze``), cached."""
        from diagnosers.report import WhatIfReport

        rec = self.record(trace_id)
        ref = self.ref(rec)
        return self._result(
            "whatif",
            rec.id,
            "",
            lambda: self.run(jobs.whatif_json, ref, progress=progress, affinity=ref.key),
            WhatIfReport,
        )

    def scenario(self, trace_id: str, **selector: Any) -> Any:
        """One what-if scenario (``diagnosers.whatif.run_scenario``), cached by its selector."""
        from diagnosers.report import ScenarioResult

        rec = self.record(trace_id)
        ref = self.ref(rec)

        def check() -> None:
            job = rec.summary["job"]
            steps = list(rec.summary["steps"])
            if selector.get("steps") and rec.summary["n_steps"] > len(steps):
                steps = self.run(jobs.traced_steps, ref, affinity=ref.key)  # the summary keeps 50
            check_shape(int(job["dp"]), int(job["pp"]), steps, selector)

        key = json.dumps(selector, sort_keys=True)
        return self._result(
            "scenario",
            rec.id,
            key,
            lambda: self.run(jobs.scenario_json, ref, selector, affinity=ref.key),
            ScenarioResult,
            check,
        )

    def diagnosis(self, trace_id: str, progress: Progress | None = None) -> Any:
        """The diagnosis (``diagnosers.diagnose.diagnose``) on the cached report, cached."""
        from diagnosers.diagnose import Diagnosis

        rec = self.record(trace_id)
        ref = self.ref(rec)

        def compute() -> str:
            self.whatif(trace_id, scaled(progress, 0.0, 0.6))
            report = self.store.get_result(rec.id, "whatif", "")
            assert report is not None
            return self.run(
                jobs.diagnosis_json, ref, report, progress=scaled(progress, 0.6, 1.0), affinity=ref.key
            )

        return self._result("diagnosis", rec.id, "", compute, Diagnosis)

    def heatmap_model(self, trace_id: str, step: int | None = None, scale: str = "fixed") -> Any:
        """The ``Heatmap`` of the job, or of one step, on the ``fixed`` or ``adaptive`` scale."""
        from diagnosers.heatmap import job_heatmap, step_heatmap

        if scale not in ("fixed", "adaptive"):
            raise ApiError(400, "bad_parameter", f"scale={scale!r} must be 'fixed' or 'adaptive'")
        report = self.whatif(trace_id)
        hm = job_heatmap(report, scale=scale) if step is None else step_heatmap(report, step, scale=scale)  # type: ignore[arg-type]
        if hm is None:
            raise ApiError(
                400, "bad_step", f"no heatmap for step {step}; traced steps: {shown_steps(report.steps)}"
            )
        return hm

    def heatmap(self, trace_id: str, step: int | None = None, scale: str = "fixed") -> tuple[bytes, Any, str]:
        """(PNG bytes, ``Heatmap``, text grid) of the job heatmap, or of one step's heatmap.

        The PNG is cached (base64 in the results table) because drawing costs more than the
        lookup; the grid and the matrix come from the cached report.
        """
        from diagnosers.render.text import render_grid

        hm = self.heatmap_model(trace_id, step, scale)
        key = "" if step is None else str(step)
        if scale != "fixed":
            key = f"{key}:{scale}"  # the fixed scale keeps the keys of stores written before

        def draw() -> str:
            return base64.b64encode(self.run(jobs.heatmap_png, hm)).decode()

        body = self._cached(trace_id, "heatmap_png", key, draw)
        return base64.b64decode(body), hm, render_grid(hm)

    def incident_count(self) -> int | None:
        """How many cases the incident library holds, or None when the server runs without one."""
        if self.library is None:
            return None
        return len(self.library)
