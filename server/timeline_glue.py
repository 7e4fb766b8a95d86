"""Timelines for the surfaces: validate, call ``diagnosers.timeline``, cache (no analysis here).

``timeline_json`` is the Chrome trace-event document of chosen steps (REST
``/api/traces/{id}/timeline.json``, the MCP ``trace://{id}/timeline/{steps}`` resource);
``timeline_analysis_json`` the critical paths and the time breakdown (``include=timeline``). Both
are computed on demand only and stored like every other result (kind ``timeline`` /
``timeline_analysis``, keyed by the steps), so a second read is a lookup.
"""

from __future__ import annotations

import json
from typing import Any

from diagnosers.model import TraceError
from server.errors import ApiError
from server.service import Lens, shown_steps

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


def _compute(lens: Lens, trace_id: str, kind: str, steps: list[int] | None, fn: Any) -> str:
    rec = lens.record(trace_id)

    def compute() -> str:
        eng = lens.engine(rec)
        try:
            return str(fn(eng, steps))
        except TraceError as exc:
            if exc.step is not None or "steps asked for" in str(exc):
                raise ApiError(
                    400, "bad_step", f"{exc.detail}; traced steps: {shown_steps(eng.steps)}"
                ) from exc
            raise

    key = steps_key(steps)
    hit = lens.peek("json", kind, rec.id, key)
    if hit is not None:
        return str(hit)
    body = lens._cached(rec.id, kind, key, compute)
    if len(body) <= MEMO_MAX_BYTES:  # larger documents are read from the store each time
        lens.memo(("json", kind, rec.id, key), body)
    return body


def timeline_json(lens: Lens, trace_id: str, steps: list[int] | None = None) -> str:
    """The Chrome trace-event JSON of ``steps`` (default: the worst and a typical step)."""
    from diagnosers.timeline import chrome_trace

    return _compute(
        lens,
        trace_id,
        "timeline",
        steps,
        lambda eng, s: json.dumps(chrome_trace(eng, s), separators=(",", ":"), allow_nan=False),
    )


def timeline_analysis_json(lens: Lens, trace_id: str, steps: list[int] | None = None) -> str:
    """``TimelineAnalysis`` JSON of ``steps`` (default here: every traced step)."""
    from diagnosers.timeline import analyze_timeline

    return _compute(
        lens, trace_id, "timeline_analysis", steps, lambda eng, s: analyze_timeline(eng, s).model_dump_json()
    )


def whatif_with(lens: Lens, trace_id: str, include: list[str]) -> str:
    """The stored what-if report with the ``include``d extras added as top-level keys."""
    body = lens.result_json("whatif", trace_id)
    if not include:
        return body
    doc = json.loads(body)
    if "timeline" in include:
        doc["timeline"] = json.loads(timeline_analysis_json(lens, trace_id))
    return json.dumps(doc)
