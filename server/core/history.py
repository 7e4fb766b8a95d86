"""Per-job history views: a window's stored summary, the trend over windows, comparing two.

Nothing here analyses a trace: the summary is a projection of the ``Diagnosis`` the engine
produced (``window_summary``), and the trend and comparison read those stored summaries only.
Fields the report contract does not carry yet (fidelity, a cause's marginal gain, its onset) are
``None`` and rendered as "unknown".
"""

from __future__ import annotations

from typing import Any

import numpy as np

MAX_STEPS = 200
MAX_CAUSES = 10
MAX_WORKERS = 512
# A trend needs this many windows; below it the correlation says nothing.
TREND_MIN_WINDOWS = 3
# S "grows" when its rank correlation with time reaches this over the windows considered.
TREND_GROWING_RHO = 0.6


def _dump(value: Any) -> Any:
    if value is None:
        return None
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    return value


def _onset_step(cause: Any) -> int | None:
    """The step at which a cause with temporal ``onset`` begins (None otherwise or unknown)."""
    pattern = getattr(cause, "pattern", None)
    if pattern is None or str(getattr(pattern, "temporal", "")) != "onset":
        return None
    step = getattr(pattern, "onset_step", None)
    return int(step) if step is not None else None


def window_summary(diagnosis: Any, missing_ranks: list[int] | None = None) -> dict[str, Any]:
    """What a job's history keeps of one window's ``Diagnosis`` (bounded: at most
    ``MAX_STEPS`` steps, ``MAX_CAUSES`` causes, ``MAX_WORKERS`` workers)."""
    report = diagnosis.report
    causes = []
    for c in list(diagnosis.causes)[:MAX_CAUSES]:
        causes.append(
            {
                "id": str(c.id),
                "confidence": float(c.confidence),
                "summary": c.summary,
                "pattern": _dump(c.pattern),
                "location": _dump(c.location),
                # job speedup if only this cause were fixed (T_now / T_after), None: not simulated
                "marginal_gain": _dump(getattr(c, "marginal_gain", None)),
                "onset": _onset_step(c),
            }
        )
    remedies = [
        {"cause_id": r.cause_id, "action": r.action, "predicted_speedup": float(r.predicted_speedup)}
        for r in diagnosis.remedies
    ]
    workers = [
        {
            "dp_rank": w.dp_rank,
            "pp_rank": w.pp_rank,
            "slowdown": w.slowdown if w.slowdown is not None else w.slowdown_estimate,
        }
        for w in report.attribution.by_worker[:MAX_WORKERS]
    ]
    steps = dict(list(report.step_slowdown.items())[:MAX_STEPS])
    fidelity = getattr(diagnosis, "fidelity", None) or getattr(report, "fidelity", None)
    return {
        "summary": diagnosis.summary,
        "slowdown": float(diagnosis.slowdown),
        "straggling": bool(diagnosis.straggling),
        "wasted_fraction": float(report.wasted_fraction),
        "step_slowdown": steps,
        "steps_total": len(report.step_slowdown),
        "causes": causes,
        "remedies": remedies,
        "best_remedy": max(remedies, key=lambda r: r["predicted_speedup"]) if remedies else None,
        "workers": workers,
        "fidelity": _dump(fidelity),
        "growing": [c["id"] for c in causes if (c["pattern"] or {}).get("temporal") == "growing"],
        "job": {"dp": report.job.dp, "pp": report.job.pp, "tp": report.job.tp, "cp": report.job.cp},
        "missing_ranks": list(missing_ranks or []),
    }


def spearman(values: list[float]) -> float | None:
    """Spearman's rank correlation of ``values`` with their order (time), ties averaged; None
    for fewer than ``TREND_MIN_WINDOWS`` values or a constant series."""
    if len(values) < TREND_MIN_WINDOWS:
        return None
    x = np.arange(len(values), dtype=float)
    y = _ranks(np.asarray(values, dtype=float))
    if np.all(y == y[0]):
        return None
    return float(np.corrcoef(x, y)[0, 1])


def _ranks(a: np.ndarray) -> np.ndarray:
    order = a.argsort(kind="stable")
    ranks = np.empty(len(a), dtype=float)
    ranks[order] = np.arange(len(a), dtype=float)
    for v in np.unique(a):  # ties share their mean rank
        tie = a == v
        if tie.sum() > 1:
            ranks[tie] = ranks[tie].mean()
    return ranks


def trend(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """The trend over a job's windows, oldest first: the rank correlation of S with time, of each
    cause's marginal gain (its speedup if fixed alone; a window without the cause counts 1.0, a
    gain not simulated makes the correlation ``unknown``), and the causes the detectors call
    ``growing`` or give an ``onset`` step in the latest window."""
    s = [float(x["slowdown"]) for x in summaries if x.get("slowdown") is not None]
    rho = spearman(s)
    causes: dict[str, Any] = {}
    ids = sorted({c["id"] for x in summaries for c in x.get("causes") or []})
    for cid in ids:
        gains = []
        for x in summaries:
            hit = next((c for c in x.get("causes") or [] if c["id"] == cid), None)
            g = hit.get("marginal_gain") if hit else 1.0  # absent: fixing it gains nothing
            gains.append(g)
        known = [g for g in gains if isinstance(g, int | float)]
        causes[cid] = {
            "windows": sum(1 for x in summaries if any(c["id"] == cid for c in x.get("causes") or [])),
            "marginal_gain_rho": spearman(known) if len(known) == len(gains) else "unknown",
        }
    latest = summaries[-1] if summaries else {}
    onsets = {c["id"]: c.get("onset") for c in latest.get("causes") or [] if c.get("onset") is not None}
    return {
        "windows": len(summaries),
        "slowdown": {
            "rho": rho,
            "growing": rho is not None and rho >= TREND_GROWING_RHO,
            "first": s[0] if s else None,
            "last": s[-1] if s else None,
        },
        "causes": causes,
        "growing": list(latest.get("growing") or []),
        "onset": onsets or "unknown",
    }


def compare(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Window ``before`` versus window ``after`` ("did my fix help?"): S and wasted fraction
    before and after, per-cause change (appeared / gone / stayed with confidence and marginal
    gain), per-worker slowdown change (largest changes first), and the remedies ``before``
    predicted versus the speedup that happened (T ratio = S_before / S_after, since the ideal step
    time is the job's own)."""
    s0, s1 = float(before["slowdown"]), float(after["slowdown"])
    c0 = {c["id"]: c for c in before.get("causes") or []}
    c1 = {c["id"]: c for c in after.get("causes") or []}
    causes = []
    for cid in sorted(set(c0) | set(c1)):
        a, b = c0.get(cid), c1.get(cid)
        causes.append(
            {
                "id": cid,
                "change": "gone" if b is None else "appeared" if a is None else "stayed",
                "confidence_before": a["confidence"] if a else None,
                "confidence_after": b["confidence"] if b else None,
                "marginal_gain_before": _known(a, "marginal_gain"),
                "marginal_gain_after": _known(b, "marginal_gain"),
            }
        )
    w0 = {(w["dp_rank"], w["pp_rank"]): w["slowdown"] for w in before.get("workers") or []}
    w1 = {(w["dp_rank"], w["pp_rank"]): w["slowdown"] for w in after.get("workers") or []}
    workers = []
    for key in sorted(set(w0) & set(w1)):
        a, b = w0[key], w1[key]
        if a is None or b is None:
            continue
        workers.append({"dp_rank": key[0], "pp_rank": key[1], "before": a, "after": b, "change": b - a})
    workers.sort(key=lambda w: -abs(w["change"]))
    actual = s0 / s1 if s1 > 0 else None
    remedies = [
        {
            **r,
            "actual_speedup": actual,
            "cause_after": "gone" if r["cause_id"] not in c1 else "still there",
        }
        for r in before.get("remedies") or []
    ]
    return {
        "slowdown_before": s0,
        "slowdown_after": s1,
        "slowdown_change": s1 - s0,
        "wasted_before": before.get("wasted_fraction"),
        "wasted_after": after.get("wasted_fraction"),
        "improved": s1 < s0,
        "causes": causes,
        "workers": workers[:50],
        "workers_total": len(workers),
        "remedies": remedies,
    }


def _known(cause: dict[str, Any] | None, key: str) -> Any:
    if cause is None:
        return None
    value = cause.get(key)
    return "unknown" if value is None else value
