"""DP-rank x PP-rank slowdown matrices (the data behind SMon's heatmaps, METHOD.md A7).

A heatmap holds one value per worker cell: rows are PP ranks, columns are DP ranks. Three kinds:

- ``exact``: the report's per-worker slowdown S_w (only that worker's ops put back into the ideal
  run); where the engine restricted exact runs to the top K, the estimate fills the other cells;
- ``estimate``: the artifact's ``min(S_dp, S_pp)`` variant, for comparison with the study;
- per step: ``min(S_dp(step), S_pp(step))`` from the per-step put-backs of the report (exact
  per-step, per-worker runs would cost DP x PP simulations per step).

Large grids are bucketed (consecutive ranks merged, cell = maximum, so a single hot worker stays
visible) to at most ``max_cols`` x ``max_rows`` cells; the heatmap says so in ``note``.
Rendering lives in :mod:`diagnosers.render`; nothing here draws.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from diagnosers.report import WhatIfReport

Variant = Literal["exact", "estimate", "step-estimate"]

# SMon's colour scale (METHOD.md A7): 1.0 = not slowed, 1.5 and above = fully red.
VMIN = 1.0
VMAX = 1.5


class Heatmap(BaseModel):
    """A DP x PP slowdown matrix, possibly bucketed. ``values[pp_row][dp_col]``."""

    model_config = ConfigDict(extra="forbid")

    title: str
    variant: Variant
    step: int | None = Field(None, description="the step, for per-step heatmaps")
    dp_size: int
    pp_size: int
    values: list[list[float]] = Field(description="rows = PP ranks (or buckets), columns = DP ranks")
    dp_labels: list[str]
    pp_labels: list[str]
    bucketed: bool = False
    note: str | None = Field(None, description="how ranks were bucketed, when they were")
    vmin: float = VMIN
    vmax: float = VMAX

    def matrix(self) -> npt.NDArray[np.float64]:
        """The values as a (rows, cols) float array."""
        return np.asarray(self.values, dtype=np.float64).reshape(len(self.pp_labels), len(self.dp_labels))

    def hottest(self) -> tuple[int, int, float]:
        """(row, col, value) of the maximum cell (first one on ties)."""
        m = self.matrix()
        r, c = np.unravel_index(int(np.argmax(m)), m.shape)
        return int(r), int(c), float(m[r, c])


def worker_matrix(
    report: WhatIfReport, variant: Literal["exact", "estimate"] = "exact"
) -> npt.NDArray[np.float64]:
    """The job's (pp, dp) per-worker slowdown matrix; 1.0 where the report has no entry."""
    dp, pp = report.job.dp, report.job.pp
    m = np.ones((pp, dp), dtype=np.float64)
    for w in report.attribution.by_worker:
        if not (0 <= w.pp_rank < pp and 0 <= w.dp_rank < dp):
            continue
        if variant == "exact" and w.slowdown is not None:
            m[w.pp_rank, w.dp_rank] = w.slowdown
        else:
            m[w.pp_rank, w.dp_rank] = w.slowdown_estimate
    if not report.attribution.by_worker:
        # No per-worker entries: fall back to the artifact's estimate from the job put-backs.
        m = _min_matrix(report.attribution.by_dp_rank, report.attribution.by_stage, dp, pp)
    return m


def _min_matrix(
    by_dp: dict[str, float], by_stage: dict[str, float], dp: int, pp: int
) -> npt.NDArray[np.float64]:
    sd = np.array([by_dp.get(str(d), 1.0) for d in range(dp)], dtype=np.float64)
    sp = np.array([by_stage.get(str(s), 1.0) for s in range(pp)], dtype=np.float64)
    return np.minimum(sd[None, :], sp[:, None])


def step_matrix(report: WhatIfReport, step: int) -> npt.NDArray[np.float64]:
    """The artifact's per-step estimate ``min(S_dp(step), S_pp(step))`` as a (pp, dp) matrix."""
    key = str(step)
    by_dp = report.attribution.by_dp_rank_per_step.get(key)
    by_stage = report.attribution.by_stage_per_step.get(key)
    if by_dp is None or by_stage is None:
        raise KeyError(f"the report has no per-step put-backs for step {step}")
    return _min_matrix(by_dp, by_stage, report.job.dp, report.job.pp)


def _bucket_edges(n: int, limit: int) -> list[tuple[int, int]]:
    """Split ``range(n)`` into at most ``limit`` contiguous, near-equal [start, stop) buckets."""
    if n <= limit:
        return [(i, i + 1) for i in range(n)]
    size = math.ceil(n / limit)
    return [(a, min(a + size, n)) for a in range(0, n, size)]


def _label(a: int, b: int) -> str:
    return str(a) if b - a == 1 else f"{a}-{b - 1}"


def make_heatmap(
    matrix: npt.NDArray[np.float64],
    *,
    title: str,
    variant: Variant,
    step: int | None = None,
    max_cols: int = 64,
    max_rows: int = 32,
) -> Heatmap:
    """Wrap a (pp, dp) matrix, bucketing ranks so the result has at most max_rows x max_cols cells.

    A bucket's value is the maximum of its cells: the point of the map is to show where the slow
    workers are, and a mean would dilute a single hot worker among its bucket.
    """
    m = np.asarray(matrix, dtype=np.float64)
    pp, dp = m.shape
    rows, cols = _bucket_edges(pp, max_rows), _bucket_edges(dp, max_cols)
    bucketed = len(rows) < pp or len(cols) < dp
    note = None
    if bucketed:
        m = np.maximum.reduceat(m, [a for a, _ in rows], axis=0)
        m = np.maximum.reduceat(m, [a for a, _ in cols], axis=1)
        parts = []
        if len(cols) < dp:
            parts.append(f"DP ranks in buckets of {cols[0][1] - cols[0][0]}")
        if len(rows) < pp:
            parts.append(f"PP ranks in buckets of {rows[0][1] - rows[0][0]}")
        note = f"{dp} x {pp} grid bucketed: {', '.join(parts)}; each cell shows its bucket's maximum"
    return Heatmap(
        title=title,
        variant=variant,
        step=step,
        dp_size=dp,
        pp_size=pp,
        values=[[round(float(v), 4) for v in row] for row in m],
        dp_labels=[_label(a, b) for a, b in cols],
        pp_labels=[_label(a, b) for a, b in rows],
        bucketed=bucketed,
        note=note,
    )


def fidelity_prefix(report: WhatIfReport) -> str:
    """"UNRELIABLE (...): " when the report's fidelity is unreliable, so every picture says it first."""
    f = report.fidelity
    if f.verdict != "unreliable":
        return ""
    return f"UNRELIABLE (step time {f.unexplained_error * 100:.0f}% off the simulation): "


def job_heatmap(
    report: WhatIfReport,
    variant: Literal["exact", "estimate"] = "exact",
    *,
    max_cols: int = 64,
    max_rows: int = 32,
) -> Heatmap:
    """The job's per-worker slowdown heatmap (exact S_w, or the artifact's min(dp, stage) estimate)."""
    what = "per-worker slowdown S_w" if variant == "exact" else "min(S_dp, S_pp) estimate"
    title = fidelity_prefix(report) + f"{report.job.trial_name}: {what} (S = {report.slowdown:.3f})"
    return make_heatmap(
        worker_matrix(report, variant), title=title, variant=variant, max_cols=max_cols, max_rows=max_rows
    )


def step_heatmap(
    report: WhatIfReport, step: int, *, max_cols: int = 64, max_rows: int = 32
) -> Heatmap | None:
    """The estimate heatmap of one step, or None when the report has no put-backs for it."""
    key = str(step)
    att = report.attribution
    if key not in att.by_dp_rank_per_step or key not in att.by_stage_per_step:
        return None
    s = report.step_slowdown.get(key)
    title = f"{report.job.trial_name} step {step}: min(S_dp, S_pp)" + (f" (step S = {s:.3f})" if s else "")
    title = fidelity_prefix(report) + title
    return make_heatmap(
        step_matrix(report, step),
        title=title,
        variant="step-estimate",
        step=step,
        max_cols=max_cols,
        max_rows=max_rows,
    )


def step_heatmaps(report: WhatIfReport, *, max_cols: int = 64, max_rows: int = 32) -> dict[int, Heatmap]:
    """One estimate heatmap per step that has per-step put-backs, keyed by step id."""
    maps = {step: step_heatmap(report, step, max_cols=max_cols, max_rows=max_rows) for step in report.steps}
    return {step: hm for step, hm in maps.items() if hm is not None}
