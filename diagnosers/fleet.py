"""Fleet statistics: the study's analyses over many jobs, from one row per job.

A *row* (``fleet_row``) is what one job's diagnosis contributes to the fleet: S, the study's
``wasted_fraction`` (1 − 1/S), GPU-hours and GPU-hours wasted, fidelity, the top causes with their
marginal gains, M_W, M_S, the per-step spread and the job's sizes. ``fleet_statistics(rows)`` then
computes what the OSDI'25 study reports for its 3,079 jobs (METHOD.md, "metrics"):

- the share of straggling jobs (S ≥ ``STRAGGLING_THRESHOLD`` = 1.1);
- the share of GPU-hours wasted: Σ wasted_fraction × GPUs × duration over Σ GPUs × duration (a job
  without a GPU count or duration is left out of this share only, and counted in ``unweighted``);
- CDFs of S and of wasted_fraction (sorted values, so any quantile can be read off);
- the cause mix: per cause, the share of analysed jobs whose top cause it is, the share where it is
  found at all, and the mean S and mean marginal gain of those jobs;
- how often fixing the slowest 3% of workers removes most of the slowdown: the share of straggling
  jobs with M_W > ``MOST_OF_SLOWDOWN`` (0.5, the study's "more than half");
- the per-step slowdown normalised by the job's S, pooled over every step of every job (median and
  p90; the study: 1.0 and 1.06), and per job its p90;
- the correlation of S with job size (Spearman rank correlation with the GPU count; the study found
  no clear positive correlation).

Jobs whose fidelity is ``unreliable`` are counted apart (the study discards traces with more than
5% simulation error): they appear in the table, in ``unreliable_jobs`` and ``counts``, and in no
statistic. Failed jobs (no diagnosis) likewise appear only in ``counts`` and ``failures``.

No Ray, no server: plain functions over rows (dicts), so the same code serves the fleet command,
a notebook, or a test's oracle.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import BaseModel, Field

from diagnosers.vocab import STRAGGLING_THRESHOLD

if TYPE_CHECKING:
    from diagnosers.diagnose import Diagnosis

# "Removes most of the slowdown": the study's "more than half" (fixing the slowest 3% of workers
# removes more than half the slowdown in only 1.7% of straggling jobs).
MOST_OF_SLOWDOWN = 0.5
# How many causes a row keeps (ranked by marginal gain, as the diagnosis ranks them).
TOP_CAUSES = 3
# CDFs in the JSON report are thinned to at most this many points (the table keeps every job).
CDF_POINTS = 200

STATUS_OK = "ok"
STATUS_FAILED = "failed"

# The fleet table's columns, in order, with their Arrow types (null where a value is unavailable).
# ``cause_k`` / ``cause_k_gain`` are the k-th cause and its marginal gain (T_now / T_after).
TABLE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("job_id", "string"),
    ("team", "string"),
    ("status", "string"),
    ("error", "string"),
    ("content_hash", "string"),
    ("slowdown", "float64"),
    ("straggling", "bool"),
    ("wasted_fraction", "float64"),
    ("measured_loss_fraction", "float64"),
    ("gpus", "int64"),
    ("duration_hours", "float64"),
    ("gpu_hours", "float64"),
    ("gpu_hours_wasted", "float64"),
    ("fidelity", "string"),
    ("unexplained_error", "float64"),
    ("cause_1", "string"),
    ("cause_1_gain", "float64"),
    ("cause_2", "string"),
    ("cause_2_gain", "float64"),
    ("cause_3", "string"),
    ("cause_3_gain", "float64"),
    ("m_w", "float64"),
    ("m_s", "float64"),
    ("step_spread_p90", "float64"),
    ("step_spread_max", "float64"),
    ("dp", "int64"),
    ("pp", "int64"),
    ("tp", "int64"),
    ("cp", "int64"),
    ("workers", "int64"),
    ("world_size", "int64"),
    ("steps", "int64"),
    ("n_ops", "int64"),
    ("analysis_seconds", "float64"),
)
COLUMN_NAMES = tuple(name for name, _ in TABLE_COLUMNS)


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def empty_row(job_id: str, **fields: Any) -> dict[str, Any]:
    """A row with every column null except ``job_id`` and the given fields."""
    row: dict[str, Any] = dict.fromkeys(COLUMN_NAMES)
    row["job_id"] = job_id
    row.update(fields)
    return row


def fleet_row(
    diagnosis: Diagnosis,
    job_id: str,
    *,
    gpus: int | None = None,
    duration_hours: float | None = None,
    team: str | None = None,
) -> dict[str, Any]:
    """One job's row of the fleet table, from its diagnosis.

    ``gpus`` defaults to the job's world size (dp × pp × tp × cp from its meta); GPU-hours need a
    duration (wall-clock hours), else they stay null. The per-step spread is the job's per-step
    slowdown over its S (p90 and max over its steps; 1.0 = every step equally slow).
    """
    rep = diagnosis.report
    job = rep.job
    world = job.dp * job.pp * job.tp * job.cp
    gpus = gpus if gpus is not None else world
    s = float(rep.slowdown)
    ratios = np.array(list(rep.step_slowdown.values()), dtype=float) / s if rep.step_slowdown else None
    gpu_hours = gpus * duration_hours if duration_hours is not None else None
    row = empty_row(
        job_id,
        team=team,
        status=STATUS_OK,
        slowdown=s,
        straggling=s >= STRAGGLING_THRESHOLD,
        wasted_fraction=float(rep.wasted_fraction),
        measured_loss_fraction=float(rep.measured_loss_fraction),
        gpus=gpus,
        duration_hours=duration_hours,
        gpu_hours=gpu_hours,
        gpu_hours_wasted=gpu_hours * float(rep.wasted_fraction) if gpu_hours is not None else None,
        fidelity=str(diagnosis.fidelity.verdict),
        unexplained_error=_finite(diagnosis.fidelity.unexplained_error),
        m_w=_finite(rep.m_w),
        m_s=_finite(rep.m_s),
        step_spread_p90=float(np.quantile(ratios, 0.9)) if ratios is not None and ratios.size else None,
        step_spread_max=float(ratios.max()) if ratios is not None and ratios.size else None,
        dp=job.dp,
        pp=job.pp,
        tp=job.tp,
        cp=job.cp,
        workers=job.dp * job.pp,
        world_size=world,
        steps=len(rep.steps),
        n_ops=rep.n_ops,
    )
    for k, cause in enumerate(diagnosis.causes[:TOP_CAUSES], start=1):
        row[f"cause_{k}"] = str(cause.id)
        row[f"cause_{k}_gain"] = _finite(cause.marginal_gain)
    # The pooled per-step ratios are not a table column (a list); the report needs them.
    row["_step_ratios"] = [float(x) for x in ratios] if ratios is not None else []
    return row


# ---------------------------------------------------------------------------------------------
# The report


class CauseShare(BaseModel):
    """One cause across the reliable analysed jobs."""

    cause: str
    top_share: float = Field(description="share of reliable analysed jobs whose top cause this is")
    found_share: float = Field(description="share of reliable analysed jobs where it is found at all")
    jobs: int = Field(description="jobs whose top cause this is")
    mean_slowdown: float | None = Field(description="mean S of the jobs whose top cause this is")
    mean_marginal_gain: float | None = Field(description="mean marginal gain of this cause where top")


class Cdf(BaseModel):
    """An empirical CDF: ``x`` sorted, ``p[i]`` = share of jobs with value ≤ ``x[i]``."""

    x: list[float] = Field(default_factory=list)
    p: list[float] = Field(default_factory=list)


class FleetReport(BaseModel):
    """The study's fleet statistics over the reliable analysed jobs (see the module docstring)."""

    counts: dict[str, int] = Field(
        description="jobs: total, analysed, failed, unreliable (counted apart), reliable (in the stats)"
    )
    straggling_share: float | None = Field(description="share of reliable jobs with S >= 1.1")
    gpu_hours: float | None = Field(description="GPU-hours of the reliable jobs that have them")
    gpu_hours_wasted: float | None
    gpu_hours_wasted_share: float | None = Field(description="wasted over total GPU-hours (weighted)")
    unweighted_wasted_share: float | None = Field(description="mean wasted_fraction over jobs")
    mean_slowdown: float | None
    slowdown_quantiles: dict[str, float] = Field(default_factory=dict)
    wasted_fraction_quantiles: dict[str, float] = Field(default_factory=dict)
    slowdown_cdf: Cdf = Field(default_factory=Cdf)
    wasted_fraction_cdf: Cdf = Field(default_factory=Cdf)
    cause_mix: list[CauseShare] = Field(default_factory=list, description="by top-cause share, largest first")
    no_cause_share: float | None = Field(description="share of reliable jobs with no cause found")
    m_w_most_share: float | None = Field(
        description="share of straggling reliable jobs where fixing the slowest 3% of workers removes "
        "more than half of the slowdown (M_W > 0.5)"
    )
    m_w_median: float | None = Field(description="median M_W over straggling reliable jobs")
    step_spread: dict[str, float] = Field(
        default_factory=dict, description="per-step slowdown / S pooled over all steps: median, p90, max"
    )
    size_correlation: float | None = Field(
        description="Spearman rank correlation of S with the GPU count (None with < 3 sizes)"
    )
    by_team: dict[str, dict[str, float | int | None]] = Field(default_factory=dict)
    unreliable_jobs: list[str] = Field(default_factory=list)
    failures: dict[str, str] = Field(default_factory=dict, description="job id -> reason")
    notes: list[str] = Field(default_factory=list)


def _quantiles(values: np.ndarray) -> dict[str, float]:
    if not values.size:
        return {}
    qs = {"p10": 0.1, "p50": 0.5, "p90": 0.9, "p99": 0.99}
    out = {k: float(np.quantile(values, q)) for k, q in qs.items()}
    out["max"] = float(values.max())
    return out


def cdf(values: Sequence[float] | np.ndarray, points: int = CDF_POINTS) -> Cdf:
    """Empirical CDF of ``values``, thinned to at most ``points`` evenly spaced ranks (last kept)."""
    x = np.sort(np.asarray(values, dtype=float))
    if not x.size:
        return Cdf()
    p = np.arange(1, x.size + 1) / x.size
    if x.size > points:
        idx = np.unique(np.linspace(0, x.size - 1, points).round().astype(int))
        x, p = x[idx], p[idx]
    return Cdf(x=[float(v) for v in x], p=[float(v) for v in p])


def spearman(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float | None:
    """Spearman rank correlation (average ranks for ties); None when either side is constant or n < 3."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.size < 3 or np.unique(x).size < 2 or np.unique(y).size < 2:
        return None
    rx, ry = _ranks(x), _ranks(y)
    return float(np.corrcoef(rx, ry)[0, 1])


def _ranks(v: np.ndarray) -> np.ndarray:
    order = np.argsort(v, kind="mergesort")
    ranks = np.empty(v.size, dtype=float)
    ranks[order] = np.arange(v.size, dtype=float)
    # ties get their average rank
    _, inverse, counts = np.unique(v, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    return (sums / counts)[inverse]


def _mean(values: Iterable[float | None]) -> float | None:
    vs = [v for v in values if v is not None]
    return float(np.mean(vs)) if vs else None


def _cause_mix(rows: Sequence[Mapping[str, Any]]) -> tuple[list[CauseShare], float | None]:
    n = len(rows)
    if not n:
        return [], None
    top: dict[str, list[Mapping[str, Any]]] = {}
    found: dict[str, int] = {}
    for r in rows:
        if r.get("cause_1"):
            top.setdefault(r["cause_1"], []).append(r)
        for k in range(1, TOP_CAUSES + 1):
            c = r.get(f"cause_{k}")
            if c:
                found[c] = found.get(c, 0) + 1
    mix = [
        CauseShare(
            cause=c,
            top_share=len(top.get(c, [])) / n,
            found_share=found[c] / n,
            jobs=len(top.get(c, [])),
            mean_slowdown=_mean(r["slowdown"] for r in top.get(c, [])),
            mean_marginal_gain=_mean(r.get("cause_1_gain") for r in top.get(c, [])),
        )
        for c in found
    ]
    mix.sort(key=lambda m: (-m.top_share, -m.found_share, m.cause))
    none = sum(1 for r in rows if not r.get("cause_1")) / n
    return mix, none


def _gpu_hours(rows: Sequence[Mapping[str, Any]]) -> tuple[float | None, float | None]:
    have = [r for r in rows if r.get("gpu_hours") is not None]
    if not have:
        return None, None
    total = float(sum(r["gpu_hours"] for r in have))
    wasted = float(sum(r["gpu_hours"] * r["wasted_fraction"] for r in have))
    return total, wasted


def _team_stats(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float | int | None]]:
    teams: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        if r.get("team"):
            teams.setdefault(str(r["team"]), []).append(r)
    out: dict[str, dict[str, float | int | None]] = {}
    for team, rs in sorted(teams.items()):
        total, wasted = _gpu_hours(rs)
        out[team] = {
            "jobs": len(rs),
            "straggling_share": sum(bool(r["straggling"]) for r in rs) / len(rs),
            "mean_slowdown": _mean(r["slowdown"] for r in rs),
            "gpu_hours": total,
            "gpu_hours_wasted": wasted,
        }
    return out


def fleet_statistics(rows: Iterable[Mapping[str, Any]]) -> FleetReport:
    """The study's fleet statistics over ``rows`` (``fleet_row`` dicts, or failed rows).

    A row counts as analysed when its ``status`` is ``ok``; analysed rows whose ``fidelity`` is
    ``unreliable`` are counted apart and enter no statistic. Everything else is over the reliable
    analysed rows; the M_W share is over the straggling ones among them.
    """
    rows = list(rows)
    ok = [r for r in rows if r.get("status") == STATUS_OK]
    failed = {str(r["job_id"]): str(r.get("error") or "failed") for r in rows if r.get("status") != STATUS_OK}
    unreliable = [r for r in ok if r.get("fidelity") == "unreliable"]
    rel = [r for r in ok if r.get("fidelity") != "unreliable"]
    counts = {
        "jobs": len(rows),
        "analysed": len(ok),
        "failed": len(failed),
        "unreliable": len(unreliable),
        "reliable": len(rel),
    }
    notes: list[str] = []
    s = np.array([r["slowdown"] for r in rel], dtype=float)
    wf = np.array([r["wasted_fraction"] for r in rel], dtype=float)
    total, wasted = _gpu_hours(rel)
    missing_hours = sum(1 for r in rel if r.get("gpu_hours") is None)
    if missing_hours:
        notes.append(
            f"{missing_hours} reliable job(s) have no wall-clock duration, so no GPU-hours; they are "
            "left out of the weighted wasted share only"
        )
    strag = [r for r in rel if r["straggling"]]
    m_w = np.array([r["m_w"] for r in strag if r.get("m_w") is not None], dtype=float)
    ratios = np.array([x for r in rel for x in r.get("_step_ratios") or []], dtype=float)
    if rel and not ratios.size:
        # rows read back from the table carry only the per-job p90
        ratios = np.array([r["step_spread_p90"] for r in rel if r.get("step_spread_p90") is not None])
        if ratios.size:
            notes.append("per-step spread pooled from each job's p90 (the per-step values were not kept)")
    mix, none = _cause_mix(rel)
    sized = [r for r in rel if r.get("gpus") is not None]
    if unreliable:
        notes.append(
            f"{len(unreliable)} job(s) with unreliable fidelity (simulation error above 5%) are counted "
            "apart, as the study discards them"
        )
    return FleetReport(
        counts=counts,
        straggling_share=len(strag) / len(rel) if rel else None,
        gpu_hours=total,
        gpu_hours_wasted=wasted,
        gpu_hours_wasted_share=wasted / total if total and wasted is not None else None,
        unweighted_wasted_share=float(wf.mean()) if wf.size else None,
        mean_slowdown=float(s.mean()) if s.size else None,
        slowdown_quantiles=_quantiles(s),
        wasted_fraction_quantiles=_quantiles(wf),
        slowdown_cdf=cdf(s),
        wasted_fraction_cdf=cdf(wf),
        cause_mix=mix,
        no_cause_share=none,
        m_w_most_share=float((m_w > MOST_OF_SLOWDOWN).mean()) if m_w.size else None,
        m_w_median=float(np.median(m_w)) if m_w.size else None,
        step_spread={"median": float(np.median(ratios)), "p90": float(np.quantile(ratios, 0.9)),
                     "max": float(ratios.max())} if ratios.size else {},
        size_correlation=spearman([r["gpus"] for r in sized], [r["slowdown"] for r in sized]),
        by_team=_team_stats(rel),
        unreliable_jobs=sorted(str(r["job_id"]) for r in unreliable),
        failures=dict(sorted(failed.items())),
        notes=notes,
    )


# ---------------------------------------------------------------------------------------------
# Renderings: the table (parquet), the text report


def write_table(rows: Iterable[Mapping[str, Any]], path: str | Path) -> Path:
    """Write the fleet table (one row per job, ``TABLE_COLUMNS``; null where unavailable) as parquet."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = list(rows)
    schema = pa.schema([(name, pa.type_for_alias(t)) for name, t in TABLE_COLUMNS])
    cols = {name: [r.get(name) for r in rows] for name in COLUMN_NAMES}
    table = pa.Table.from_pydict(cols, schema=schema)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, out)
    return out


def read_table(path: str | Path) -> list[dict[str, Any]]:
    """The fleet table's rows as dicts (what ``fleet_statistics`` takes)."""
    import pyarrow.parquet as pq

    return [dict(r) for r in pq.read_table(Path(path)).to_pylist()]


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def render_fleet_text(report: FleetReport) -> str:
    """The fleet report as plain text (what the CLI prints and ``report.txt`` holds)."""
    c = report.counts
    lines = [
        f"Fleet: {c['jobs']} jobs, {c['analysed']} analysed, {c['failed']} failed, "
        f"{c['unreliable']} unreliable (counted apart); statistics over {c['reliable']} jobs.",
        f"Straggling jobs (S >= {STRAGGLING_THRESHOLD}): {_pct(report.straggling_share)}",
    ]
    if report.gpu_hours is not None:
        lines.append(
            f"GPU-hours wasted: {_pct(report.gpu_hours_wasted_share)} "
            f"({report.gpu_hours_wasted or 0:,.1f} of {report.gpu_hours:,.1f} GPU-hours)"
        )
    lines.append(f"Mean wasted fraction per job (unweighted): {_pct(report.unweighted_wasted_share)}")
    if report.slowdown_quantiles:
        q = report.slowdown_quantiles
        lines.append(
            f"S: mean {report.mean_slowdown:.3f}, p50 {q['p50']:.3f}, p90 {q['p90']:.3f}, "
            f"p99 {q['p99']:.3f}, max {q['max']:.3f}"
        )
    if report.cause_mix:
        lines.append("Cause mix (top cause share / found share / mean S / mean marginal gain):")
        for m in report.cause_mix:
            ms = "n/a" if m.mean_slowdown is None else f"{m.mean_slowdown:.3f}"
            mg = "n/a" if m.mean_marginal_gain is None else f"{m.mean_marginal_gain:.3f}x"
            lines.append(f"  {m.cause:<28} {_pct(m.top_share):>7} {_pct(m.found_share):>7} {ms:>7} {mg:>8}")
        lines.append(f"  {'(no cause found)':<28} {_pct(report.no_cause_share):>7}")
    lines.append(
        f"Fixing the slowest 3% of workers removes more than half the slowdown in "
        f"{_pct(report.m_w_most_share)} of straggling jobs"
        + ("" if report.m_w_median is None else f" (median M_W {report.m_w_median:.2f})")
    )
    if report.step_spread:
        sp = report.step_spread
        lines.append(
            f"Per-step slowdown / S: median {sp['median']:.3f}, p90 {sp['p90']:.3f}, max {sp['max']:.3f}"
        )
    corr = "n/a" if report.size_correlation is None else f"{report.size_correlation:+.2f}"
    lines.append(f"Spearman correlation of S with job size (GPUs): {corr}")
    for team, t in report.by_team.items():
        lines.append(f"Team {team}: {t['jobs']} jobs, straggling {_pct(t['straggling_share'])}")
    if report.failures:
        lines.append("Failed jobs:")
        lines.extend(f"  {job}: {why}" for job, why in report.failures.items())
    if report.unreliable_jobs:
        lines.append("Unreliable (not in the statistics): " + ", ".join(report.unreliable_jobs))
    lines.extend(f"Note: {n}" for n in report.notes)
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# One job


def analyse_job(
    paths: Sequence[str | Path],
    job_id: str,
    *,
    meta_path: str | Path | None = None,
    gpus: int | None = None,
    duration_hours: float | None = None,
    team: str | None = None,
) -> dict[str, Any]:
    """Read one job's trace, diagnose it (no incident search) and return its fleet row.

    Raises what the readers and the engine raise on bad input (``TraceError`` and friends); the
    caller records that as the job's failure.
    """
    import time

    from diagnosers.diagnose import diagnose
    from diagnosers.readers import ReadOptions, load_trace

    t0 = time.perf_counter()
    opts = ReadOptions(meta_path=Path(meta_path) if meta_path else None)
    trace = load_trace([Path(p) for p in paths], opts)
    diagnosis = diagnose(trace, similar=None)
    row = fleet_row(diagnosis, job_id, gpus=gpus, duration_hours=duration_hours, team=team)
    row["analysis_seconds"] = time.perf_counter() - t0
    return row
