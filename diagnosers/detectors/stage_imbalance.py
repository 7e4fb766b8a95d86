"""Stage imbalance: one pipeline stage (usually the last, with the loss/logits layer; or the first,
with the embedding) carries more work than the others (METHOD.md A6).

Evidence, all of which must hold:
- the stage's put-back S_stage is the largest and its M_S-style ratio (``m_s_by_stage``: idealise
  every op of that stage) is large — the stage is where the slowdown lives;
- the whole PP row is heavy, not one cell: every DP rank of the stage carries at least half the
  compute excess of the typical (median) one, measured against the other stages' compute;
- the row is not a slow host in disguise: a middle stage that is exactly one host's workers, or a
  row whose host(s) also hold other hot workers, is left to the faulty-machine detector;
- what-if: scaling only that stage's compute to the job-wide typical per-op-type duration, keeping
  every within-stage variation, removes at least ``MIN_SHARE`` of the slowdown. That isolates the
  between-stage part from, say, sequence-length noise living on the same stage.
"""

from __future__ import annotations

import numpy as np

from diagnosers.detectors.base import (
    MIN_SHARE,
    CauseMatch,
    TraceStats,
    categories_for,
    confidence,
    host_cluster,
    rounded,
)
from diagnosers.detectors.registry import register
from diagnosers.detectors.stats import BWD, FWD
from diagnosers.heatmap import worker_matrix
from diagnosers.report import WhatIfReport
from diagnosers.vocab import DECOMPOSE_THRESHOLD, CauseId, Pattern, Resource, Spatial, Temporal


def balanced_stage_durations(stats: TraceStats, stage: int) -> np.ndarray:
    """Original durations with ``stage``'s forward/backward compute scaled so its per-type mean
    equals the job-wide mean of that type (the ideal), keeping the variation inside the stage."""
    assert stats.probe is not None
    d = stats.probe.original.copy()
    for code in (FWD, BWD):
        m = (stats.optype == code) & (stats.op_pp == stage)
        if not m.any():
            continue
        mean_here = d[m].mean()
        target = stats.probe.ideal[m].mean()
        if mean_here > 0:
            d[m] *= target / mean_here
    return d


def _hot_cells_on_hosts(
    stats: TraceStats, report: WhatIfReport, cells: list[tuple[int, int]]
) -> list[tuple[int, int]]:
    """Hot cells (S_w excess >= half the hottest) on the hosts of ``cells``."""
    m = worker_matrix(report, "exact")
    excess = m - 1.0
    top = float(excess.max())
    hs = {int(stats.host_of[d, p]) for d, p in cells}
    return [
        (d, p)
        for d in range(stats.dp)
        for p in range(stats.pp)
        if int(stats.host_of[d, p]) in hs and top > 0 and excess[p, d] >= 0.5 * top
    ]


def _heavy_row(
    stats: TraceStats, report: WhatIfReport, comp: np.ndarray, hot: int
) -> tuple[float, float, list[int] | None] | None:
    """(typical, max row ratio, host cluster or None) when stage ``hot``'s whole row is heavy."""
    others = np.delete(comp, hot, axis=1)
    ref = float(np.median(others)) if others.size else 0.0
    if ref <= 0:
        return None
    row = comp[:, hot] / ref
    row_typical, row_max, row_min = float(np.median(row)), float(row.max()), float(row.min())
    # Every DP rank of the row carries the excess (at least half the typical rank's), so a single
    # hot cell — or one hot cell among two DP ranks — is not a heavy stage.
    if row_typical <= 1.0 or (row_min - 1.0) < 0.5 * (row_typical - 1.0):
        return None
    row_cells = [(d, hot) for d in range(stats.dp)]
    hosts = host_cluster(stats, row_cells)
    if hosts is None:
        # The row may share its host(s) with other hot workers: then the host, not the stage, is hot.
        on_hosts = _hot_cells_on_hosts(stats, report, row_cells)
        if any(p != hot for _, p in on_hosts) and host_cluster(stats, on_hosts) is not None:
            return None
    elif hot not in (0, stats.pp - 1):
        # A middle stage that is exactly one host's workers: a heavy middle stage is not a known
        # signature, a slow host is.
        return None
    return row_typical, row_max, hosts


@register(CauseId.STAGE_IMBALANCE)
def detect(report: WhatIfReport, stats: TraceStats) -> CauseMatch | None:
    """Match a hot PP row; None when the job is not slowed or no stage stands out."""
    if report.slowdown < DECOMPOSE_THRESHOLD or stats.pp < 2:
        return None
    by_stage = {int(k): v for k, v in report.attribution.by_stage.items()}
    if not by_stage:
        return None
    comp = stats.compute.mean(axis=0)  # (dp, pp)
    # Stages in order of their put-back; the first whose whole row is heavy is the candidate (a
    # faulty worker can make another stage's put-back larger without its row being heavy).
    for hot in sorted(by_stage, key=lambda s: -by_stage[s]):
        if by_stage[hot] <= 1.0:
            return None
        row_info = _heavy_row(stats, report, comp, hot)
        if row_info is not None:
            break
    else:
        return None
    row_typical, row_max, hosts = row_info
    ms = report.m_s_by_stage.get(str(hot))
    m_s = ms.rem if ms is not None and ms.rem is not None else None

    if stats.probe is not None:
        t_bal = float(stats.probe.mean_times(balanced_stage_durations(stats, hot))[0])
        gap = stats.probe.t_orig - stats.probe.t_ideal
        share = (stats.probe.t_orig - t_bal) / gap if gap > 0 else 0.0
    else:
        share = m_s if m_s is not None else 0.0
    if share < MIN_SHARE:
        return None

    others_f = np.delete(stats.stage_fwd_mean, hot)
    others_b = np.delete(stats.stage_bwd_mean, hot)
    fwd_ratio = stats.stage_fwd_mean[hot] / others_f.mean() if others_f.mean() > 0 else float("nan")
    bwd_ratio = stats.stage_bwd_mean[hot] / others_b.mean() if others_b.mean() > 0 else float("nan")
    second = max((v for s, v in by_stage.items() if s != hot), default=1.0)
    # Fit: how clearly the stage dominates the put-backs, and whether idealising the stage (M_S)
    # agrees that most of the slowdown sits there.
    dominance = min(1.0, (by_stage[hot] - 1.0) / max(report.slowdown - 1.0, 1e-9))
    fit = 0.7 + 0.15 * dominance + (0.15 if (m_s or 0.0) >= 0.5 else 0.0)
    if second > 1.0 and (second - 1.0) > 0.5 * (by_stage[hot] - 1.0):
        fit -= 0.2  # a second stage is nearly as hot: the row is not a clean single-stage signature
    layers = stats.layers_per_stage
    stage_comp = stats.compute.mean(axis=(0, 1))
    explained = False
    if layers is not None and min(layers) > 0:
        per_layer = stage_comp / np.asarray(layers, dtype=np.float64)
        # The partition explains the heavy stage when its compute per layer is like the others'.
        explained = bool(per_layer[hot] <= 1.1 * float(np.median(np.delete(per_layer, hot))))
    middle = hot not in (0, stats.pp - 1)
    if middle and not explained:
        # The known mechanisms are the embedding (first stage), the loss head (last stage) or a
        # partition that gives a stage more layers; a heavy middle stage with none of them is
        # weaker evidence (with one DP rank, a slow machine fills the row the same way).
        fit *= 0.7
    if hosts is not None:
        summary_host = f" The stage sits exactly on host {hosts[0]}, so a slow host would look the same."
    else:
        summary_host = ""
    where = "last" if hot == stats.pp - 1 else ("first" if hot == 0 else f"stage {hot}")
    cells = [(d, hot) for d in range(stats.dp)]
    summary = (
        f"Pipeline stage {hot} ({where} stage) is heavier than the others: its forward compute averages "
        f"{fwd_ratio:.2f}x and its backward {bwd_ratio:.2f}x the other stages', on every DP rank "
        f"(typical DP rank {row_typical:.2f}x the other stages' compute). Putting back only that stage's "
        f"durations gives S_stage = {by_stage[hot]:.3f}; idealising the stage removes "
        f"{(m_s or 0.0) * 100:.0f}% of the slowdown (M_S), and balancing only its mean compute removes "
        f"{share * 100:.0f}%. Every step waits for this stage, so the pipeline runs at its pace."
        + summary_host
    )
    return CauseMatch(
        id=CauseId.STAGE_IMBALANCE,
        confidence=confidence(share, fit),
        location=stats.location(cells),
        pattern=Pattern(spatial=Spatial.ONE_STAGE, temporal=Temporal.PERSISTENT, resource=Resource.COMPUTE),
        evidence={
            "stage": hot,
            "s_stage": rounded(by_stage[hot]),
            "m_s": rounded(m_s) if m_s is not None else None,
            "balance_share": rounded(share),
            "fwd_ratio_vs_other_stages": rounded(fwd_ratio),
            "bwd_ratio_vs_other_stages": rounded(bwd_ratio),
            "row_compute_ratio_median": rounded(row_typical),
            "row_compute_ratio_max": rounded(row_max),
            "next_hottest_stage_s": rounded(second),
        },
        summary=summary,
        categories=categories_for(CauseId.STAGE_IMBALANCE),
    )
