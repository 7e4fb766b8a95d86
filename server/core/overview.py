"""What the web pages list: one row per stored trace, and the data a trace page draws.

Rows are taken from results already computed (a trace never diagnosed shows its shape only):
listing traces must never start a diagnosis. Everything here calls ``Lens`` and the packages and
reshapes their models; no analysis logic lives here.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from server.core.service import Lens
from server.core.store import TraceRecord


class TraceRow(BaseModel):
    """One line of the trace list."""

    trace_id: str
    name: str
    created_at: str
    job: str = Field(description="e.g. 'dp 2 x pp 4'")
    n_steps: int
    diagnosed: bool
    slowdown: float | None = None
    verdict: str | None = Field(default=None, description="straggling / mildly slowed / not straggling")
    fidelity: str | None = Field(
        default=None, description="the diagnosis's fidelity verdict, when it has one"
    )
    top_cause: str | None = None


def verdict_of(slowdown: float, straggling: bool) -> str:
    """The verdict in the diagnosis summary's words."""
    if straggling:
        return "straggling"
    return "mildly slowed" if slowdown > 1.0 + 1e-9 else "not straggling"


def fidelity_of(diagnosis: Any) -> str | None:
    """The fidelity verdict of a diagnosis (``None`` for diagnoses that carry none)."""
    f = getattr(diagnosis, "fidelity", None)
    if f is None:
        return None
    verdict = getattr(f, "verdict", f)
    return str(getattr(verdict, "value", verdict))


def row(lens: Lens, rec: TraceRecord) -> TraceRow:
    """The list row of a stored trace, from its cached diagnosis when there is one."""
    job = rec.summary.get("job", {})
    base = TraceRow(
        trace_id=rec.id,
        name=rec.name,
        created_at=rec.created_at,
        job=f"dp {job.get('dp', '?')} x pp {job.get('pp', '?')}",
        n_steps=int(rec.summary.get("n_steps", 0)),
        diagnosed=False,
    )
    if "diagnosis" not in lens.store.cached_kinds(rec.id):
        return base
    d = lens.diagnosis(rec.id)
    return base.model_copy(
        update={
            "diagnosed": True,
            "slowdown": d.slowdown,
            "verdict": verdict_of(d.slowdown, d.straggling),
            "fidelity": fidelity_of(d),
            "top_cause": d.causes[0].id.value if d.causes else None,
        }
    )


def trace_rows(lens: Lens, query: str | None, limit: int = 100) -> tuple[int, list[TraceRow]]:
    """(total stored, rows) of the newest traces, or of those whose id or name contains
    ``query`` (case-insensitive)."""
    total, recs = lens.store.page(limit if not query else 10_000, 0)
    if query:
        q = query.strip().lower()
        recs = [r for r in recs if q in r.id.lower() or q in r.name.lower()][:limit]
    return total, [row(lens, r) for r in recs]


def job_rows(monitor: Any, limit: int = 50) -> list[dict[str, Any]] | None:
    """Watched jobs (the service loop's jobs and windows), newest first: ``name``, ``windows``
    (count), ``slowdown`` (the latest window's S), ``verdict`` (its status, or its fidelity once
    done) and ``trace_id`` (the latest window's stored trace, for its page). ``None`` when no
    monitor runs (the page then leaves the section out)."""
    if monitor is None:
        return None
    from server.core.jobs_api import list_jobs

    rows: list[dict[str, Any]] = []
    for j in list_jobs(monitor, limit=limit).jobs:
        w = j.latest
        verdict = "no window" if w is None else (w.fidelity if w.status == "done" else w.status)
        rows.append({
            "name": j.job,
            "windows": j.windows,
            "slowdown": w.slowdown if w is not None else None,
            "verdict": verdict,
            "trace_id": w.trace_id if w is not None else None,
        })
    return rows


def trace_view(lens: Lens, trace_id: str, *, max_steps: int = 64) -> dict[str, Any]:
    """Everything a trace page shows: the record, the full diagnosis, the job heatmap and its
    detail (cell ranks and hosts, per-step maps), and the per-step slowdown series."""
    from diagnosers.heatmap_detail import heatmap_detail

    rec = lens.record(trace_id)
    d = lens.diagnosis(rec.id)
    hm = lens.heatmap_model(rec.id)
    detail = heatmap_detail(d.report, max_steps=max_steps)
    series = sorted(((int(k), v) for k, v in d.report.step_slowdown.items()), key=lambda kv: kv[0])
    return {
        "record": lens.info(rec),
        "row": row(lens, rec),
        "diagnosis": d,
        "heatmap": hm,
        "detail": detail,
        "step_series": series,
    }
