"""The glue between the HTTP/MCP surfaces and the packages that do the work.

``Lens`` holds the store, the incident library and a small cache of parsed traces. Its methods
are synchronous (they run in worker threads), raise ``ApiError`` for anything a caller can fix,
and call ``diagnosers`` / ``incidents`` for every analysis: no analysis logic lives here.
Results are cached in the store, so they survive restarts; one lock per result makes concurrent
callers wait for a single computation instead of repeating it.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from diagnosers.model import Trace, TraceError
from diagnosers.readers import ReadOptions, load_trace
from server.errors import ApiError, not_found
from server.ingest import META_SUFFIXES, StagedFile, content_hash
from server.models import TraceInfo, TraceSummary, UploadResult, summarize
from server.settings import Settings
from server.store import Store, TraceRecord

# progress(fraction in [0, 1], message): called from the worker thread doing the analysis.
Progress = Callable[[float, str], None]


def scaled(progress: Progress | None, lo: float, hi: float) -> Progress | None:
    """Map a sub-task's fractions [0, 1] onto [lo, hi] of the caller's progress."""
    if progress is None:
        return None
    outer = progress

    def inner(fraction: float, message: str) -> None:
        outer(lo + (hi - lo) * fraction, message)

    return inner


READ_KEYS = ("format", "dp", "pp", "tp", "cp")


def read_options(options: dict[str, Any]) -> ReadOptions:
    """The reader options of an upload's stored options (format and the dp/pp/tp/cp sizes; a
    ``partial`` window, assembled without some ranks, is read as the smaller job it holds)."""
    extra: dict[str, object] = {"partial": True} if options.get("partial") else {}
    return ReadOptions(**{k: options[k] for k in READ_KEYS if options.get(k) is not None}, extra=extra)


def shown_steps(steps: list[int], most: int = 20) -> str:
    """``23, 25, 33 ...``: the first ``most`` step ids of a trace, for error messages."""
    return ", ".join(str(s) for s in steps[:most]) + (" ..." if len(steps) > most else "")


def check_selector(trace: Trace, selector: dict[str, Any]) -> None:
    """A 400 for scenario selectors naming ranks or steps the trace does not have: the engine
    would select no op and answer a speedup of 1.0, which reads like a real result."""
    meta = trace.meta
    for key, size, name in (("dp_ranks", meta.dp, "dp"), ("pp_ranks", meta.pp, "pp")):
        bad = sorted({int(r) for r in selector.get(key) or [] if not 0 <= int(r) < size})
        if bad:
            raise ApiError(
                400,
                "bad_scenario",
                f"{key} {bad} outside the job: its {name} size is {size} (ranks 0-{size - 1})",
            )
    missing = sorted(set(selector.get("steps") or []) - set(trace.steps))
    if missing:
        raise ApiError(
            400, "bad_scenario", f"steps {missing} are not traced; traced steps: {shown_steps(trace.steps)}"
        )


def trace_error(exc: Exception, folder: Path | None = None) -> ApiError:
    """A reader's rejection as a 422 that keeps the reader's precise message.

    The server's own folder is cut from file paths: the caller knows its files by name only.
    """
    message = str(exc)
    if folder is not None:
        message = message.replace(f"{folder}/", "").replace(str(folder), ".")
    return ApiError(422, "trace_invalid", f"the trace cannot be read: {message}")


class Lens:
    """Application state shared by REST routes and MCP tools (one per running server)."""

    def __init__(self, settings: Settings, store: Store, library: Any = None):
        self.settings = settings
        self.store = store
        self.library = library
        self._traces: OrderedDict[str, Trace] = OrderedDict()
        self._engines: OrderedDict[str, Any] = OrderedDict()
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

    def _remember(self, trace_id: str, trace: Trace) -> None:
        with self._cache_lock:
            self._traces[trace_id] = trace
            self._traces.move_to_end(trace_id)
            while len(self._traces) > self.settings.trace_cache_size:
                self._traces.popitem(last=False)

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
            try:
                trace = load_trace([staging / n for n in names], read_options(opts))
            except TraceError as exc:
                raise trace_error(exc, staging) from exc
            summary = summarize(trace, names)
            rec, created = self.store.commit_trace(
                staging,
                content_hash=chash,
                name=name,
                files=names,
                options=opts,
                summary=summary.model_dump(),
            )
        except BaseException:
            self.store.discard(staging)
            raise
        if created:
            # the files now live in the trace's folder: errors found later (by the engine) name them there
            trace.sources = [str(p) for p in self.store.file_paths(rec)]
            self._remember(rec.id, trace)
        return UploadResult(
            trace_id=rec.id, created=created, summary=TraceSummary.model_validate(rec.summary)
        )

    def trace(self, rec: TraceRecord) -> Trace:
        """The parsed trace of a record, from the cache or re-read from the data folder."""
        with self._cache_lock:
            cached = self._traces.get(rec.id)
            if cached is not None:
                self._traces.move_to_end(rec.id)
                return cached
        with self._lock_for("load", rec.id):
            with self._cache_lock:
                if rec.id in self._traces:
                    return self._traces[rec.id]
            try:
                trace = load_trace(self.store.file_paths(rec), read_options(rec.options))
            except TraceError as exc:
                raise trace_error(exc, self.store.traces_dir / rec.id) from exc
            self._remember(rec.id, trace)
            return trace

    def engine(self, rec: TraceRecord) -> Any:
        """The what-if engine of a trace (``diagnosers.whatif.build_engine``), kept beside the trace."""
        from diagnosers.whatif import build_engine

        with self._cache_lock:
            if rec.id in self._engines:
                self._engines.move_to_end(rec.id)
                return self._engines[rec.id]
        with self._lock_for("engine", rec.id):
            with self._cache_lock:
                if rec.id in self._engines:
                    return self._engines[rec.id]
            try:
                eng = build_engine(self.trace(rec))
            except TraceError as exc:
                raise trace_error(exc, self.store.traces_dir / rec.id) from exc
            with self._cache_lock:
                self._engines[rec.id] = eng
                while len(self._engines) > self.settings.trace_cache_size:
                    self._engines.popitem(last=False)
            return eng

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
        compute: Callable[[], Any],
        model: Any,
        check: Callable[[], None] | None = None,
    ) -> Any:
        """A result model from memory, else from the store, else ``compute()``d once (its JSON is
        stored, so it survives restarts). A reader or engine rejection becomes a 422. ``check``
        runs before the store is asked, so a stored result never answers a request it refuses."""

        def as_json() -> str:
            try:
                return str(compute().model_dump_json())
            except TraceError as exc:
                raise trace_error(exc, self.store.traces_dir / trace_id) from exc

        memo_key = (kind, trace_id, key) if key else (kind, trace_id)
        hit = self.peek(*memo_key)
        if hit is not None:
            return hit
        if check is not None:
            check()
        body = self._cached(trace_id, kind, key, as_json)
        return self.memo(memo_key, model.model_validate_json(body))

    def whatif(self, trace_id: str, progress: Progress | None = None) -> Any:
        """The standard what-if report (``diagnosers.whatif.analyze``), cached."""
        from diagnosers.report import WhatIfReport
        from diagnosers.whatif import analyze

        rec = self.record(trace_id)
        return self._result(
            "whatif",
            rec.id,
            "",
            lambda: analyze(self.trace(rec), progress=progress, engine=self.engine(rec)),
            WhatIfReport,
        )

    def scenario(self, trace_id: str, **selector: Any) -> Any:
        """One what-if scenario (``diagnosers.whatif.run_scenario``), cached by its selector."""
        from diagnosers.report import ScenarioResult
        from diagnosers.whatif import run_scenario

        rec = self.record(trace_id)

        def compute() -> Any:
            try:
                return run_scenario(self.engine(rec), **selector)
            except (TraceError, ValueError) as exc:
                raise ApiError(400, "bad_scenario", str(exc)) from exc

        def check() -> None:
            check_selector(self.trace(rec), selector)

        key = json.dumps(selector, sort_keys=True)
        return self._result("scenario", rec.id, key, compute, ScenarioResult, check)

    def diagnosis(self, trace_id: str, progress: Progress | None = None) -> Any:
        """The diagnosis (``diagnosers.diagnose.diagnose``) on the cached report, cached."""
        from diagnosers.diagnose import Diagnosis, diagnose

        rec = self.record(trace_id)

        def compute() -> Any:
            report = self.whatif(trace_id, scaled(progress, 0.0, 0.6))
            return diagnose(
                self.trace(rec),
                report=report,
                engine=self.engine(rec),
                similar=self.similar_fn(),
                progress=scaled(progress, 0.6, 1.0),
            )

        return self._result("diagnosis", rec.id, "", compute, Diagnosis)

    def heatmap(self, trace_id: str, step: int | None = None) -> tuple[bytes, Any, str]:
        """(PNG bytes, ``Heatmap``, text grid) of the job heatmap, or of one step's heatmap.

        The PNG is cached (base64 in the results table) because drawing costs more than the
        lookup; the grid and the matrix come from the cached report.
        """
        import base64

        from diagnosers.heatmap import job_heatmap, step_heatmap
        from diagnosers.render.png import render_png
        from diagnosers.render.text import render_grid

        report = self.whatif(trace_id)
        hm = job_heatmap(report) if step is None else step_heatmap(report, step)
        if hm is None:
            raise ApiError(
                400, "bad_step", f"no heatmap for step {step}; traced steps: {shown_steps(report.steps)}"
            )
        key = "" if step is None else str(step)
        body = self._cached(trace_id, "heatmap_png", key, lambda: base64.b64encode(render_png(hm)).decode())
        return base64.b64decode(body), hm, render_grid(hm)

    def similar_fn(self) -> Callable[..., Any] | None:
        """``similar(signatures=, limit=)`` over the incident library, or None without one."""
        if self.library is None:
            return None
        from incidents.similar import similar_incidents

        library = self.library

        def similar(**kw: Any) -> Any:
            # the diagnosis iterates hits with id, title, score, reasons
            return similar_incidents(library=library, **kw).results

        return similar

    def incident_count(self) -> int | None:
        """How many cases the incident library holds, or None when the server runs without one."""
        if self.library is None:
            return None
        return len(self.library)
