"""DP-rank x PP-rank slowdown matrices (the data behind SMon's heatmaps, METHOD.md A7).

A heatmap holds one value per worker cell: rows are PP ranks, columns are DP ranks. Three kinds:

- ``exact``: the report's per-worker slowdown S_w (only that worker's ops put back into the ideal
  run); where the engine restricted exact runs to the top K, the estimate fills the other cells;
- ``estimate``: the artifact's ``min(S_dp, S_pp)`` variant, for comparison with the study;
- per step: ``min(S_dp(step), S_pp(step))`` from the per-step put-backs of the report (exact
  per-step, per-worker runs would cost DP x PP simulations per step).

Titles say in plain words what a cell is (``TITLES``); formulas stay in docstrings. The colour scale
is the study's fixed 1.0-1.5 by default; ``scale="adaptive"`` stretches it over the values (so a
mild 1.03 shows), and ``clipped`` / ``scale_note`` say when values fall outside the scale drawn.

Large grids are bucketed (consecutive ranks merged, cell = maximum, so a single hot worker stays
visible) to at most ``max_cols`` x ``max_rows`` cells; the heatmap says so in ``note``.
Rendering lives in :mod:`diagnosers.render`; nothing here draws.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
import numpy.typing as npt

from diagnosers.plainmodel import PlainModel, pydantic_checked, validating

if TYPE_CHECKING:
    from diagnosers.report_view import Report

Variant = Literal["exact", "estimate", "step-estimate"]
VARIANTS = ("exact", "estimate", "step-estimate")

Scale = Literal["fixed", "adaptive"]
SCALES = ("fixed", "adaptive")

# SMon's colour scale (METHOD.md A7): 1.0 = not slowed, 1.5 and above = fully red.
VMIN = 1.0
VMAX = 1.5
# The adaptive scale never spans less than this, so noise (1.001 vs 1.002) is not painted red.
ADAPTIVE_MIN_SPAN = 0.02

# What a cell means, in plain words (the titles of the three kinds of map).
TITLES = {
    "exact": "how much each worker alone slows the job (S_w: job step time with only that worker "
    "at its measured speed, over the ideal; 1.00 = no effect)",
    "estimate": "per-worker slowdown estimated from its DP rank and stage (the smaller of the two; "
    "1.00 = no effect)",
    "step-estimate": "how much each worker slows this step (the smaller of its DP rank's and its "
    "stage's effect; 1.00 = no effect)",
}
JOB_S = "job slowdown S = {s:.3f} (mean step time over the ideal step time)"


# A plain dataclass that pydantic validates and describes where it is loaded (the Diagnosis model,
# the server's views) with the schema it had as a model (:mod:`diagnosers.plainmodel`), so that the
# diagnosis builds its heatmap without importing pydantic.
@dataclass(kw_only=True)
class Heatmap(PlainModel):
    """A DP x PP slowdown matrix, possibly bucketed. ``values[pp_row][dp_col]``."""

    __pydantic_config__: ClassVar[dict[str, Any]] = {"extra": "forbid"}

    title: str
    variant: Variant
    step: int | None = field(default=None, metadata={"description": "the step, for per-step heatmaps"})
    dp_size: int
    pp_size: int
    values: list[list[float]] = field(
        metadata={"description": "rows = PP ranks (or buckets), columns = DP ranks"}
    )
    dp_labels: list[str]
    pp_labels: list[str]
    bucketed: bool = False
    note: str | None = field(
        default=None, metadata={"description": "how ranks were bucketed, when they were"}
    )
    vmin: float = VMIN
    vmax: float = VMAX
    scale: Scale = field(
        default="fixed",
        metadata={"description": "fixed: the study's 1.0-1.5; adaptive: stretched over the values"},
    )
    clipped: int = field(
        default=0, metadata={"description": "cells outside [vmin, vmax], drawn at the end colour"}
    )
    scale_note: str | None = field(
        default=None, metadata={"description": "says when the scale is clipped, and what to do"}
    )

    def __post_init__(self) -> None:
        if validating():
            return
        plain = (
            type(self.title) is str
            and self.variant in VARIANTS
            and (self.step is None or type(self.step) is int)
            and type(self.dp_size) is int
            and type(self.pp_size) is int
            and type(self.values) is list
            and all(type(row) is list and all(type(v) is float for v in row) for row in self.values)
            and _strs(self.dp_labels)
            and _strs(self.pp_labels)
            and type(self.bucketed) is bool
            and (self.note is None or type(self.note) is str)
            and type(self.vmin) is float
            and type(self.vmax) is float
            and self.scale in SCALES
            and type(self.clipped) is int
            and (self.scale_note is None or type(self.scale_note) is str)
        )
        if not plain:
            pydantic_checked(self)

    def matrix(self) -> npt.NDArray[np.float64]:
        """The values as a (rows, cols) float array."""
        return np.asarray(self.values, dtype=np.float64).reshape(len(self.pp_labels), len(self.dp_labels))

    def hottest(self) -> tuple[int, int, float]:
        """(row, col, value) of the maximum cell (first one on ties)."""
        m = self.matrix()
        r, c = np.unravel_index(int(np.argmax(m)), m.shape)
        return int(r), int(c), float(m[r, c])


def _strs(values: Any) -> bool:
    return type(values) is list and all(type(v) is str for v in values)


def worker_matrix(
    report: Report, variant: Literal["exact", "estimate"] = "exact"
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


def step_matrix(report: Report, step: int) -> npt.NDArray[np.float64]:
    """The artifact's per-step estimate ``min(S_dp(step), S_pp(step))`` as a (pp, dp) matrix."""
    key = str(step)
    by_dp = report.attribution.by_dp_rank_per_step.get(key)
    by_stage = report.attribution.by_stage_per_step.get(key)
    if by_dp is None or by_stage is None:
        raise KeyError(f"the report has no per-step put-backs for step {step}")
    return _min_matrix(by_dp, by_stage, report.job.dp, report.job.pp)


def bucket_edges(n: int, limit: int) -> list[tuple[int, int]]:
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
    scale: Scale = "fixed",
) -> Heatmap:
    """Wrap a (pp, dp) matrix, bucketing ranks so the result has at most max_rows x max_cols cells.

    A bucket's value is the maximum of its cells: the point of the map is to show where the slow
    workers are, and a mean would dilute a single hot worker among its bucket. ``scale`` picks the
    colour range (:func:`scale_range`); the clipping count is taken on the bucketed values.
    """
    m = np.asarray(matrix, dtype=np.float64)
    pp, dp = m.shape
    rows, cols = bucket_edges(pp, max_rows), bucket_edges(dp, max_cols)
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
    hm = Heatmap(
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
    return rescale(hm, scale)


def scale_range(values: npt.NDArray[np.float64], scale: Scale) -> tuple[float, float]:
    """The colour range (vmin, vmax) of a map.

    ``fixed``: the study's 1.0-1.5. ``adaptive``: from min(1.0, smallest value) to the largest
    value, rounded out to 0.01 and at least ``ADAPTIVE_MIN_SPAN`` wide, so a job whose worst
    worker is at 1.04 uses the whole colour range instead of a faint pink.
    """
    if scale == "fixed":
        return VMIN, VMAX
    finite = values[np.isfinite(values)]
    lo = min(VMIN, float(finite.min())) if finite.size else VMIN
    hi = float(finite.max()) if finite.size else VMAX
    lo = math.floor(lo * 100) / 100
    hi = max(math.ceil(hi * 100) / 100, lo + ADAPTIVE_MIN_SPAN)
    return lo, hi


def rescale(hm: Heatmap, scale: Scale) -> Heatmap:
    """The same map drawn on the ``fixed`` or ``adaptive`` scale, with its clipping counted.

    A cell is clipped when it lies above vmax (or below vmin by more than rounding): it is drawn
    at the end colour, so its real value only shows in the numbers. ``scale_note`` then says how
    many cells and how far, and points to the adaptive scale.
    """
    m = hm.matrix()
    lo, hi = scale_range(m, scale)
    above = int(np.count_nonzero(m > hi + 1e-9))
    below = int(np.count_nonzero(m < lo - 0.005))
    note = None
    if above or below:
        parts = []
        if above:
            parts.append(f"{above} of {m.size} cells above {hi:.2f} (up to {float(m.max()):.2f})")
        if below:
            parts.append(f"{below} below {lo:.2f} (down to {float(m.min()):.2f})")
        note = f"scale clipped: {' and '.join(parts)} are drawn at the end colour"
        if scale == "fixed":
            note += "; the adaptive scale shows them apart"
    return hm.model_copy(
        update={"vmin": lo, "vmax": hi, "scale": scale, "clipped": above + below, "scale_note": note}
    )


def fidelity_prefix(report: Report) -> str:
    """"UNRELIABLE (...): " when the report's fidelity is unreliable, so every picture says it first."""
    f = report.fidelity
    if f.verdict != "unreliable":
        return ""
    return f"UNRELIABLE (step time {f.unexplained_error * 100:.0f}% off the simulation): "


def job_heatmap(
    report: Report,
    variant: Literal["exact", "estimate"] = "exact",
    *,
    max_cols: int = 64,
    max_rows: int = 32,
    scale: Scale = "fixed",
) -> Heatmap:
    """The job's per-worker slowdown heatmap (exact S_w, or the artifact's min(dp, stage) estimate)."""
    title = fidelity_prefix(report) + (
        f"{report.job.trial_name}: {TITLES[variant]}; {JOB_S.format(s=report.slowdown)}"
    )
    return make_heatmap(
        worker_matrix(report, variant),
        title=title,
        variant=variant,
        max_cols=max_cols,
        max_rows=max_rows,
        scale=scale,
    )


def step_heatmap(
    report: Report, step: int, *, max_cols: int = 64, max_rows: int = 32, scale: Scale = "fixed"
) -> Heatmap | None:
    """The estimate heatmap of one step, or None when the report has no put-backs for it."""
    key = str(step)
    att = report.attribution
    if key not in att.by_dp_rank_per_step or key not in att.by_stage_per_step:
        return None
    s = report.step_slowdown.get(key)
    title = f"{report.job.trial_name} step {step}: {TITLES['step-estimate']}" + (
        f"; this step's slowdown = {s:.3f} (its time over its ideal time)" if s else ""
    )
    title = fidelity_prefix(report) + title
    return make_heatmap(
        step_matrix(report, step),
        title=title,
        variant="step-estimate",
        step=step,
        max_cols=max_cols,
        max_rows=max_rows,
        scale=scale,
    )


def step_heatmaps(report: Report, *, max_cols: int = 64, max_rows: int = 32) -> dict[int, Heatmap]:
    """One estimate heatmap per step that has per-step put-backs, keyed by step id."""
    maps = {step: step_heatmap(report, step, max_cols=max_cols, max_rows=max_rows) for step in report.steps}
    return {step: hm for step, hm in maps.items() if hm is not None}
