"""What an interactive view shows beside a job's heatmap: each cell's ranks and hosts, both colour
scales, and the per-step maps (pydantic models of the server's views; the maps themselves are
:mod:`diagnosers.heatmap`'s)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from diagnosers.heatmap import bucket_edges, job_heatmap, rescale, step_heatmap
from diagnosers.model import int_ranges

if TYPE_CHECKING:
    from diagnosers.report_view import Report


class StepMap(BaseModel):
    """One step's map on the job map's grid, with its adaptive range and both scales' notes."""

    step: int
    slowdown: float | None = Field(default=None, description="this step's slowdown (its time over its ideal)")
    values: list[list[float]]
    adaptive: tuple[float, float]
    note_fixed: str | None = None
    note_adaptive: str | None = None


class HeatmapDetail(BaseModel):
    """What an interactive view shows beside the job map (same grid, ``[row][col]``): each cell's
    global ranks and hosts, both colour scales, and the per-step maps of up to ``max_steps`` steps
    (the slowest, in step order; ``omitted_steps`` counts the rest)."""

    ranks: list[list[str]] = Field(description="global ranks of each cell ('' when not traced)")
    hosts: list[list[str]] = Field(description="hosts (rank // gpus_per_host) of each cell")
    adaptive: tuple[float, float] = Field(description="the adaptive colour range of the job map")
    note_fixed: str | None = None
    note_adaptive: str | None = None
    steps: list[StepMap] = Field(default_factory=list)
    omitted_steps: int = 0


def heatmap_detail(
    report: Report, *, max_steps: int = 64, max_cols: int = 64, max_rows: int = 32
) -> HeatmapDetail:
    """The per-cell ranks and hosts and the per-step maps of the job map ``job_heatmap(report)``.

    Cells are bucketed exactly as the job map (same ``max_cols`` / ``max_rows``), a bucket lists
    the ranks of all its workers. Steps beyond ``max_steps`` are left out, the fastest first, so a
    long trace keeps the steps worth looking at.
    """
    dp, pp = report.job.dp, report.job.pp
    rows, cols = bucket_edges(pp, max_rows), bucket_edges(dp, max_cols)
    by_cell: dict[tuple[int, int], list[int]] = {}
    for w in report.attribution.by_worker:
        by_cell.setdefault((w.pp_rank, w.dp_rank), []).extend(w.ranks)
    gph = max(1, report.job.gpus_per_host)
    ranks: list[list[str]] = []
    hosts: list[list[str]] = []
    for ra, rb in rows:
        rrow, hrow = [], []
        for ca, cb in cols:
            cell = [r for p in range(ra, rb) for d in range(ca, cb) for r in by_cell.get((p, d), [])]
            rrow.append(int_ranges(cell, ","))
            hrow.append(int_ranges([r // gph for r in cell], ","))
        ranks.append(rrow)
        hosts.append(hrow)
    fixed = job_heatmap(report, max_cols=max_cols, max_rows=max_rows)
    adaptive = rescale(fixed, "adaptive")
    with_maps = [
        s
        for s in report.steps
        if str(s) in report.attribution.by_dp_rank_per_step and str(s) in report.attribution.by_stage_per_step
    ]
    keep = sorted(with_maps, key=lambda s: report.step_slowdown.get(str(s), 0.0), reverse=True)[:max_steps]
    maps = []
    for s in sorted(keep):
        hm = step_heatmap(report, s, max_cols=max_cols, max_rows=max_rows)
        assert hm is not None
        ad = rescale(hm, "adaptive")
        maps.append(
            StepMap(
                step=s,
                slowdown=report.step_slowdown.get(str(s)),
                values=hm.values,
                adaptive=(ad.vmin, ad.vmax),
                note_fixed=hm.scale_note,
                note_adaptive=ad.scale_note,
            )
        )
    return HeatmapDetail(
        ranks=ranks,
        hosts=hosts,
        adaptive=(adaptive.vmin, adaptive.vmax),
        note_fixed=fixed.scale_note,
        note_adaptive=adaptive.scale_note,
        steps=maps,
        omitted_steps=len(with_maps) - len(keep),
    )
