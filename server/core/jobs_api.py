"""Bounded, typed views of jobs, windows, comparisons and alerts for REST, MCP and chat alike.

Each function takes the running :class:`server.core.monitor.Monitor`, validates its arguments (a 4xx
``ApiError`` naming what is wrong) and returns a pydantic model; REST dumps it as JSON, MCP
returns it as structured content, chat renders it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field

from server.core.errors import ApiError, not_found
from server.core.history import compare, trend
from server.core.jobs_store import WindowRow
from server.core.monitor import check_id

MAX_WINDOWS = 100


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")


class WindowInfo(BaseModel):
    """One profiling window: its status and, once analysed, the headline numbers."""

    job: str
    window: str
    seq: int = Field(description="order of the window within its job (1 = first)")
    status: str = Field(description="receiving | analysing | done | failed")
    reason: str | None = Field(None, description="why the window failed")
    world_size: int | None = Field(None, description="expected ranks (from the sender or the first file)")
    ranks_received: int
    missing_ranks: list[int] = Field(default_factory=list)
    created_at: str
    updated_at: str
    trace_id: str | None = Field(
        None, description="the stored trace once assembled (use the trace tools on it)"
    )
    slowdown: float | None = None
    wasted_fraction: float | None = None
    causes: list[str] = Field(default_factory=list, description="cause ids found, strongest first")
    fidelity: str = Field("unknown", description="the report's fidelity verdict, or unknown")
    notes: list[str] = Field(default_factory=list)


class WindowDetail(WindowInfo):
    summary: dict[str, Any] | None = Field(None, description="the stored projection of the diagnosis")


class JobInfo(BaseModel):
    job: str
    created_at: str
    updated_at: str
    windows: int
    latest: WindowInfo | None = None


class JobList(BaseModel):
    total: int
    jobs: list[JobInfo]
    truncated: bool


class JobDetail(BaseModel):
    """A job's history (newest window first) and its trend over the analysed windows."""

    job: str
    total: int
    windows: list[WindowInfo]
    truncated: bool
    trend: dict[str, Any]


class Comparison(BaseModel):
    """Window ``before`` versus ``after``: did the fix help?"""

    job: str
    before: str
    after: str
    slowdown_before: float
    slowdown_after: float
    slowdown_change: float
    wasted_before: float | None
    wasted_after: float | None
    improved: bool
    causes: list[dict[str, Any]] = Field(
        description="per cause: appeared / gone / stayed, confidence, marginal gain"
    )
    workers: list[dict[str, Any]] = Field(
        description="per-worker slowdown change, largest first (at most 50)"
    )
    workers_total: int
    remedies: list[dict[str, Any]] = Field(
        description="what 'before' predicted versus the speedup that happened"
    )


class AlertDetail(BaseModel):
    """One alert: what fired, its payload, and per destination the delivery state and log."""

    id: str
    rule: str
    job: str
    window: str
    cause: str
    kind: str = Field(description="new | reminder")
    created_at: str
    payload: dict[str, Any]
    outbox: list[dict[str, Any]] = Field(
        description="per destination: state, tries, and the log of every try"
    )


class AlertList(BaseModel):
    total: int
    alerts: list[dict[str, Any]]
    truncated: bool


def window_info(w: WindowRow, detail: bool = False) -> WindowInfo:
    s = w.summary or {}
    fid = (s.get("fidelity") or {}).get("verdict") if s else None
    fields: dict[str, Any] = dict(
        job=w.job,
        window=w.id,
        seq=w.seq,
        status=w.status,
        reason=w.reason,
        world_size=w.world_size,
        ranks_received=len(w.ranks),
        missing_ranks=w.missing_ranks
        if w.status in ("receiving", "analysing")
        else s.get("missing_ranks", []),
        created_at=_iso(w.created_at),
        updated_at=_iso(w.updated_at),
        trace_id=w.trace_id,
        slowdown=s.get("slowdown"),
        wasted_fraction=s.get("wasted_fraction"),
        causes=[c["id"] for c in s.get("causes") or []],
        fidelity=fid or "unknown",
        notes=list(w.notes)[:20],
    )
    if detail:
        return WindowDetail(**fields, summary=w.summary)
    return WindowInfo(**fields)


def _limit(limit: int, hi: int = MAX_WINDOWS) -> int:
    if not 1 <= limit <= hi:
        raise ApiError(400, "bad_parameter", f"limit={limit} must be between 1 and {hi}")
    return limit


def list_jobs(monitor: Any, limit: int = 20, offset: int = 0, pattern: str | None = None) -> JobList:
    """Jobs, most recently updated first; ``pattern`` is a glob on the job name."""
    _limit(limit)
    if offset < 0:
        raise ApiError(400, "bad_parameter", f"offset={offset} must be >= 0")
    total, rows = monitor.jobs.jobs(limit, offset, pattern or None)
    jobs = [
        JobInfo(
            job=r["name"],
            created_at=_iso(r["created_at"]),
            updated_at=_iso(r["updated_at"]),
            windows=int(r["n_windows"]),
            latest=window_info(r["latest"]) if r["latest"] else None,
        )
        for r in rows
    ]
    return JobList(total=total, jobs=jobs, truncated=offset + len(jobs) < total)


def _require_job(monitor: Any, job: str) -> None:
    check_id("job", job)
    if not monitor.jobs.has_job(job):
        raise not_found("job", job, "list jobs with list_jobs / GET /api/jobs")


def get_job(monitor: Any, job: str, limit: int = 20) -> JobDetail:
    """A job's newest ``limit`` windows and the trend over them (oldest to newest)."""
    _require_job(monitor, job)
    total, rows = monitor.jobs.windows(job, _limit(limit))
    done = [r.summary for r in reversed(rows) if r.status == "done" and r.summary]
    return JobDetail(
        job=job,
        total=total,
        windows=[window_info(r) for r in rows],
        truncated=len(rows) < total,
        trend=trend(done),
    )


def get_window(monitor: Any, job: str, window: str) -> WindowDetail:
    _require_job(monitor, job)
    check_id("window", window)
    w = monitor.jobs.window(job, window)
    if w is None:
        raise not_found(
            "window", f"{job}/{window}", f"list the job's windows with get_job / GET /api/jobs/{job}"
        )
    info = window_info(w, detail=True)
    assert isinstance(info, WindowDetail)
    return info


def compare_windows(monitor: Any, job: str, before: str, after: str) -> Comparison:
    """Compare two analysed windows of one job."""
    a, b = get_window(monitor, job, before), get_window(monitor, job, after)
    for w in (a, b):
        if w.status != "done" or not w.summary:
            why = f": {w.reason}" if w.reason else ""
            raise ApiError(
                409, "window_not_analysed", f"window {w.window!r} is {w.status}{why}; compare analysed ones"
            )
    assert a.summary is not None and b.summary is not None
    return Comparison(job=job, before=before, after=after, **compare(a.summary, b.summary))


def list_alerts(monitor: Any, job: str | None = None, limit: int = 20, offset: int = 0) -> AlertList:
    """Alerts, newest first, with each destination's delivery state."""
    if job:
        check_id("job", job)
    total, rows = monitor.jobs.alerts(job, _limit(limit), max(0, offset))
    for r in rows:
        r["created_at"] = _iso(r["created_at"])
        r["payload"] = {k: r["payload"].get(k) for k in ("job", "window", "cause", "kind", "rule", "link")}
    return AlertList(total=total, alerts=rows, truncated=offset + len(rows) < total)


def get_alert(monitor: Any, alert_id: str) -> AlertDetail:
    """One alert with its payload and the delivery log (every try) of each destination."""
    if not alert_id.isalnum() or len(alert_id) > 64:
        raise ApiError(400, "bad_parameter", f"alert id {alert_id!r} is not an alert id")
    a = monitor.jobs.alert(alert_id)
    if a is None:
        raise not_found("alert", alert_id, "list alerts with GET /api/alerts")
    a["created_at"] = _iso(a["created_at"])
    return AlertDetail(**a)
