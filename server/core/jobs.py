"""The heavy steps of a request as pure, picklable functions of (trace reference, options).

Each job runs wherever the executor puts it: a worker process (the default), a thread of the
server process, or later a cluster node. A job never touches the store or SQLite; it reads the
trace's files, calls ``diagnosers`` / ``incidents`` and returns JSON text or bytes, which the
``Lens`` caches in the store. No analysis logic lives here: only loading, calling and turning
reader rejections into ``ApiError``.

A job's keyword ``ctx`` is where it keeps parsed traces and engines between calls: the ``Lens``
passes its own when jobs run in its process; in a worker process the job uses that process's
``worker_context()``. Keys are content hashes, so a trace parsed when it was uploaded is found
again by its first analysis wherever the files were moved since.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from diagnosers.model import Trace, TraceError
from diagnosers.readers.validate import ReadLimits
from server.core import faults
from server.core.errors import ApiError

# progress(fraction in [0, 1], message); any thread may call it.
Progress = Callable[[float, str], None]
READ_KEYS = ("format", "dp", "pp", "tp", "cp", "vpp", "gpus_per_host", "layers_per_stage", "partial")


@dataclass(frozen=True)
class TraceRef:
    """Where a trace's files are and how to read them: all a job needs to load it.

    ``key`` identifies the content (the upload's content hash); ``folder`` is cut from error
    messages, since a caller knows its files by name only."""

    key: str
    paths: tuple[str, ...]
    options: tuple[tuple[str, Any], ...]
    folder: str
    # the server's read budgets (None: the readers' defaults)
    limits: ReadLimits | None = None

    @classmethod
    def of(
        cls,
        key: str,
        paths: list[Path] | list[str],
        options: dict[str, Any],
        folder: Path | str,
        limits: ReadLimits | None = None,
    ) -> TraceRef:
        opts = tuple(
            sorted(
                (k, tuple(v) if isinstance(v, list) else v)
                for k in READ_KEYS
                if (v := options.get(k)) is not None
            )
        )
        return cls(key, tuple(str(p) for p in paths), opts, str(folder), limits)


def trace_error(exc: Exception, folder: Path | str | None = None) -> ApiError:
    """A reader's rejection as a 422 that keeps the reader's precise message (413 for a passed
    budget, 507 for a full disk: ``faults.api_error``).

    The server's own folder is cut from file paths: the caller knows its files by name only.
    """
    mapped = faults.api_error(exc, folder)
    if mapped is not None:
        return mapped
    message = str(exc)
    if folder is not None:
        message = message.replace(f"{folder}/", "").replace(str(folder), ".")
    return ApiError(422, "trace_invalid", f"the trace cannot be read: {message}")


@dataclass
class JobContext:
    """Per-process state of the jobs: an LRU of parsed traces and engines (``size`` traces), one
    lock per trace being loaded, and the incident library (or a loader of it)."""

    size: int = 4
    library: Any = None
    load_library: Callable[[], Any] | None = None
    _traces: OrderedDict[str, Trace] = field(default_factory=OrderedDict)
    _engines: OrderedDict[str, Any] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _loading: weakref.WeakValueDictionary[tuple[str, str], threading.Lock] = field(
        default_factory=weakref.WeakValueDictionary
    )

    def _get(self, table: OrderedDict[str, Any], key: str) -> Any:
        with self._lock:
            value = table.get(key)
            if value is not None:
                table.move_to_end(key)
            return value

    def _put(self, table: OrderedDict[str, Any], key: str, value: Any) -> None:
        with self._lock:
            table[key] = value
            table.move_to_end(key)
            while len(table) > max(1, self.size):
                table.popitem(last=False)

    def _once(self, kind: str, key: str) -> threading.Lock:
        with self._lock:
            return self._loading.setdefault((kind, key), threading.Lock())

    def remember(self, key: str, trace: Trace) -> None:
        self._put(self._traces, key, trace)

    def trace(self, ref: TraceRef) -> Trace:
        """The parsed trace of ``ref``, from the cache or read from its files (once at a time)."""
        trace = self._get(self._traces, ref.key)
        if trace is None:
            with self._once("load", ref.key):
                trace = self._get(self._traces, ref.key)
                if trace is None:
                    trace = _load(ref)
                    self._put(self._traces, ref.key, trace)
        # the upload parsed the files in its staging folder; errors found later name them here
        trace.sources = list(ref.paths)
        return trace

    def engine(self, ref: TraceRef) -> Any:
        """The what-if engine of ``ref`` (``diagnosers.whatif.build_engine``), kept beside the trace."""
        from diagnosers.whatif import build_engine

        eng = self._get(self._engines, ref.key)
        if eng is not None:
            return eng
        with self._once("engine", ref.key):
            eng = self._get(self._engines, ref.key)
            if eng is None:
                try:
                    eng = build_engine(self.trace(ref))
                except TraceError as exc:
                    raise trace_error(exc, ref.folder) from exc
                self._put(self._engines, ref.key, eng)
            return eng

    def incident_library(self) -> Any:
        if self.library is None and self.load_library is not None:
            with self._lock:
                if self.library is None:
                    self.library = self.load_library()
        return self.library


_WORKER: JobContext | None = None


def worker_context() -> JobContext:
    """This process's job context (worker processes: set up by ``init_worker``)."""
    global _WORKER
    if _WORKER is None:
        _WORKER = JobContext()
    return _WORKER


def init_worker(cache_size: int, with_library: bool) -> None:
    """Set up a worker process: its trace cache and, when wanted, the incident library loader."""
    global _WORKER
    _WORKER = JobContext(size=cache_size, load_library=open_library if with_library else None)


def warm(with_library: bool) -> int:
    """Import the engine and load the library now, so the first request does not pay for it."""
    import os

    import diagnosers.diagnose
    import diagnosers.readers
    import diagnosers.whatif  # noqa: F401

    if with_library:
        worker_context().incident_library()
    return os.getpid()


def open_library() -> Any:
    """The incident library with its search index built, or None without the incidents package."""
    try:
        import incidents.library  # noqa: F401
    except ModuleNotFoundError:
        return None
    from incidents.library import load_library

    library = load_library()
    _ = library.index  # build the search index now rather than on the first query
    return library


def read_options(options: dict[str, Any], limits: ReadLimits | None = None) -> Any:
    """The reader options of an upload's stored options: the format, the job keys the CLI's
    ``--dp --pp --tp --cp --vpp --gpus-per-host --layers-per-stage`` give, and ``partial``
    (analyse a subset of a job's ranks as a smaller job), with the server's read budgets."""
    from diagnosers.readers import ReadOptions

    given = {k: options[k] for k in READ_KEYS if options.get(k) is not None}
    extra: dict[str, object] = {"partial": True} if given.pop("partial", False) else {}
    if "layers_per_stage" in given:
        given["layers_per_stage"] = list(given["layers_per_stage"])
    return ReadOptions(**given, extra=extra, limits=limits)


def _load(ref: TraceRef) -> Trace:
    from diagnosers.readers import load_trace

    try:
        return load_trace([Path(p) for p in ref.paths], read_options(dict(ref.options), ref.limits))
    except TraceError as exc:
        raise trace_error(exc, ref.folder) from exc


# -- the jobs ------------------------------------------------------------------------------------


def parse_upload(ref: TraceRef, names: list[str], *, ctx: JobContext | None = None) -> dict[str, Any]:
    """Parse (and so validate) a staged upload; its summary as a dict. The parsed trace stays in
    the context under the content hash for the first analysis."""
    from diagnosers.readers.validate import pipeline_problem
    from server.core.models import summarize

    ctx = ctx or worker_context()
    trace = _load(ref)
    problem = pipeline_problem(trace)  # stored, it would fail every analysis: refuse it now
    if problem:
        raise trace_error(TraceError(problem), ref.folder)
    ctx.remember(ref.key, trace)
    return summarize(trace, names).model_dump()


def whatif_json(ref: TraceRef, *, ctx: JobContext | None = None, progress: Progress | None = None) -> str:
    """The standard what-if report (``diagnosers.whatif.analyze``) as JSON."""
    from diagnosers.whatif import analyze

    ctx = ctx or worker_context()
    try:
        return analyze(ctx.trace(ref), progress=progress, engine=ctx.engine(ref)).model_dump_json()
    except TraceError as exc:
        raise trace_error(exc, ref.folder) from exc


def scenario_json(ref: TraceRef, selector: dict[str, Any], *, ctx: JobContext | None = None) -> str:
    """One what-if scenario (``diagnosers.whatif.run_scenario``) as JSON; a bad selector is a 400."""
    from diagnosers.whatif import run_scenario

    ctx = ctx or worker_context()
    engine = ctx.engine(ref)
    try:
        return run_scenario(engine, **selector).model_dump_json()
    except (TraceError, ValueError) as exc:
        raise ApiError(400, "bad_scenario", str(exc)) from exc


def traced_steps(ref: TraceRef, *, ctx: JobContext | None = None) -> list[int]:
    """Every step id of the trace (the stored summary keeps the first 50 only)."""
    ctx = ctx or worker_context()
    return list(ctx.trace(ref).steps)


def diagnosis_json(
    ref: TraceRef,
    report_json: str,
    *,
    ctx: JobContext | None = None,
    progress: Progress | None = None,
) -> str:
    """The diagnosis (``diagnosers.diagnose.diagnose``) on a stored what-if report, as JSON."""
    from diagnosers.diagnose import diagnose
    from diagnosers.report import WhatIfReport

    ctx = ctx or worker_context()
    library = ctx.incident_library()
    similar = None
    if library is not None:
        from incidents.similar import similar_incidents

        def similar(**kw: Any) -> Any:
            # the diagnosis iterates hits with id, title, score, reasons
            return similar_incidents(library=library, **kw).results

    try:
        return diagnose(
            ctx.trace(ref),
            report=WhatIfReport.model_validate_json(report_json),
            engine=ctx.engine(ref),
            similar=similar,
            progress=progress,
        ).model_dump_json()
    except TraceError as exc:
        raise trace_error(exc, ref.folder) from exc


def heatmap_png(heatmap: Any, *, ctx: JobContext | None = None) -> bytes:
    """The PNG of a ``diagnosers.heatmap.Heatmap``."""
    from diagnosers.render.png import render_png

    return bytes(render_png(heatmap))
