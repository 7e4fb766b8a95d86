"""Timelines for the surfaces: validate, run ``diagnosers.timeline`` as an executor job, cache.

``timeline_json`` is the Chrome trace-event document of chosen steps (REST
``/api/traces/{id}/timeline.json``, the MCP ``trace://{id}/timeline/{steps}`` resource);
``timeline_analysis_json`` the critical paths and the time breakdown (``include=timeline``). Both
are computed on demand only, as jobs on the Lens's executor (pure functions of the trace
reference, like ``server.core.jobs``), and stored like every other result (kind ``timeline`` /
``timeline_analysis``, keyed by the steps), so a second read is a lookup. No analysis logic here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from diagnosers.model import TraceError
from server.core.errors import ApiError
from server.core.jobs import JobContext, TraceRef, worker_context
from server.core.service import Lens, shown_steps

DEFAULT_STEPS = "default"  # the worst and a typical step
INCLUDE_CHOICES = ("timeline",)
MEMO_MAX_BYTES = 1 << 20  # keep documents up to 1 MiB in memory; a 16-step timeline can be tens of MB


def parse_steps(raw: str | None) -> list[int] | None:
    """``23,25`` -> [23, 25]; empty, None or ``default`` -> None (the worst and a typical step).
    A 400 naming the parameter otherwise."""
    if raw is None or raw.strip() in ("", DEFAULT_STEPS):
        return None
    try:
        steps = [int(x) for x in raw.replace(" ", "").split(",") if x]
    except ValueError:
        raise ApiError(
            400, "bad_parameter", f"steps={raw!r} is not a comma-separated list of step ids"
        ) from None
    if not steps:
        raise ApiError(400, "bad_parameter", f"steps={raw!r} names no step")
    return steps


def steps_key(steps: list[int] | None) -> str:
    """The cache key (and resource path segment) of a step selection."""
    return DEFAULT_STEPS if steps is None else ",".join(str(s) for s in steps)


def parse_include(raw: str | None) -> list[str]:
    """``include=timeline`` (comma-separated); a 400 naming unknown values."""
    if not raw:
        return []
    values = [x for x in raw.replace(" ", "").split(",") if x]
    bad = [v for v in values if v not in INCLUDE_CHOICES]
    if bad:
        raise ApiError(
            400, "bad_parameter", f"include={raw!r}: unknown {bad}; choices: {list(INCLUDE_CHOICES)}"
        )
    return values


# -- the jobs (picklable: they run in the executor's worker processes) ------------------------


def _bad_step(exc: TraceError, steps: list[int]) -> ApiError:
    return ApiError(400, "bad_step", f"{exc.detail}; traced steps: {shown_steps(steps)}")


def chrome_trace_job(ref: TraceRef, steps: list[int] | None, *, ctx: JobContext | None = None) -> str:
    """The Chrome trace-event JSON of ``steps`` (``diagnosers.timeline.chrome_trace``)."""
    from diagnosers.timeline import chrome_trace

    eng = (ctx or worker_context()).engine(ref)
    try:
        doc = chrome_trace(eng, steps)
    except TraceError as exc:
        raise _bad_step(exc, eng.steps) from exc
    return json.dumps(doc, separators=(",", ":"), allow_nan=False)


def timeline_analysis_job(ref: TraceRef, steps: list[int] | None, *, ctx: JobContext | None = None) -> str:
    """``TimelineAnalysis`` JSON of ``steps`` (``diagnosers.timeline.analyze_timeline``)."""
    from diagnosers.timeline import analyze_timeline

    eng = (ctx or worker_context()).engine(ref)
    try:
        return analyze_timeline(eng, steps).model_dump_json()
    except TraceError as exc:
        raise _bad_step(exc, eng.steps) from exc


# -- the glue ----------------------------------------------------------------------------------


def _stored(lens: Lens, trace_id: str, kind: str, steps: list[int] | None, job: Callable[..., str]) -> str:
    rec = lens.record(trace_id)
    key = steps_key(steps)
    hit = lens.peek("json", kind, rec.id, key)
    if hit is not None:
        return str(hit)
    ref = lens.ref(rec)
    body = lens._cached(rec.id, kind, key, lambda: lens.run(job, ref, steps, affinity=ref.key))
    if len(body) <= MEMO_MAX_BYTES:  # larger documents are read from the store each time
        lens.memo(("json", kind, rec.id, key), body)
    return body


def timeline_json(lens: Lens, trace_id: str, steps: list[int] | None = None) -> str:
    """The Chrome trace-event JSON of ``steps`` (default: the worst and a typical step)."""
    return _stored(lens, trace_id, "timeline", steps, chrome_trace_job)


def timeline_analysis_json(lens: Lens, trace_id: str, steps: list[int] | None = None) -> str:
    """``TimelineAnalysis`` JSON of ``steps`` (default here: every traced step)."""
    return _stored(lens, trace_id, "timeline_analysis", steps, timeline_analysis_job)


def whatif_with(lens: Lens, trace_id: str, include: list[str]) -> str:
    """The stored what-if report with the ``include``d extras added as top-level keys."""
    body = lens.result_json("whatif", trace_id)
    if not include:
        return body
    doc: dict[str, Any] = json.loads(body)
    if "timeline" in include:
        doc["timeline"] = json.loads(timeline_analysis_json(lens, trace_id))
    return json.dumps(doc)
