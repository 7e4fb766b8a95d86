"""Faulty machine: one GPU, or the GPUs of one host, persistently slow (METHOD.md A6).

Evidence, all of which must hold:
- one or a few hot cells in the per-worker slowdown matrix (S_w), not a whole PP row: cells whose
  excess ``S_w - 1`` is at least half the hottest cell's, at most a quarter of the workers;
- persistence: in at least 3/4 of the steps, each hot cell's compute exceeds its stage peers'
  median by at least half its own typical excess (uniform noise moves from step to step);
- what-if: idealising only the hot workers (or, for a host candidate, every traced worker of that
  host, ``rank // gpus_per_host``) removes at least ``MIN_SHARE`` of the slowdown. M_W (top 3%)
  is reported as evidence; it can miss a host whose workers outnumber 3% of a small job.
"""

from __future__ import annotations

import numpy as np

from diagnosers.detectors.base import (
    MIN_SHARE,
    CauseMatch,
    TraceStats,
    categories_for,
    confidence,
    rounded,
)
from diagnosers.detectors.registry import register
from diagnosers.heatmap import worker_matrix
from diagnosers.report import WhatIfReport
from diagnosers.vocab import DECOMPOSE_THRESHOLD, CauseId, Pattern, Resource, Spatial, Temporal

PERSIST_FRACTION = 0.75


def hot_cells(report: WhatIfReport) -> list[tuple[int, int]]:
    """Cells with at least half the hottest cell's excess slowdown, hottest first."""
    m = worker_matrix(report, "exact")  # (pp, dp)
    excess = m - 1.0
    top = float(excess.max())
    if top <= 0:
        return []
    pp_idx, dp_idx = np.nonzero(excess >= 0.5 * top)
    cells = [(int(d), int(p)) for p, d in zip(pp_idx, dp_idx, strict=True)]
    return sorted(cells, key=lambda c: -excess[c[1], c[0]])


def persistence(stats: TraceStats, cells: list[tuple[int, int]]) -> tuple[float, float]:
    """(fraction of steps in which every hot cell is slow vs its stage peers, mean peer ratio).

    With a single DP rank there are no peers; the cell is compared with the median of all workers.
    """
    comp = stats.compute  # (S, dp, pp)
    if stats.dp >= 2:
        ref = np.median(comp, axis=1)  # (S, pp)
    else:
        ref = np.repeat(np.median(comp.reshape(len(comp), -1), axis=1)[:, None], stats.pp, axis=1)
    ok = np.ones(len(comp), dtype=bool)
    ratios = []
    for d, p in cells:
        x = comp[:, d, p] - ref[:, p]
        typical = float(np.median(x))
        if typical <= 0:
            return 0.0, 1.0
        ok &= x >= 0.5 * typical
        ratios.append(float(np.mean(comp[:, d, p] / np.maximum(ref[:, p], 1e-12))))
    return float(ok.mean()), float(np.mean(ratios))


@register(CauseId.FAULTY_MACHINE)
def detect(report: WhatIfReport, stats: TraceStats) -> CauseMatch | None:
    """Match persistently hot cells, clustered by host when the host's workers are hot together."""
    if report.slowdown < DECOMPOSE_THRESHOLD:
        return None
    cells = hot_cells(report)
    n_workers = stats.dp * stats.pp
    if not cells or len(cells) > max(1, n_workers // 4):
        return None
    # A whole PP row (every DP rank of a stage) is stage imbalance's signature, not a machine's.
    rows = {p for _, p in cells}
    if stats.dp >= 2 and any(sum(1 for _, p in cells if p == r) == stats.dp for r in rows):
        return None
    persist, peer_ratio = persistence(stats, cells)
    if persist < PERSIST_FRACTION:
        return None

    hosts = stats.host_of
    cell_hosts = {int(hosts[d, p]) for d, p in cells}
    candidates: list[tuple[str, list[tuple[int, int]]]] = [("workers", cells)]
    if len(cell_hosts) == 1:
        h = next(iter(cell_hosts))
        host_cells = [(int(d), int(p)) for d, p in zip(*np.nonzero(hosts == h), strict=True)]
        if len(host_cells) > len(cells):
            candidates.append(("host", host_cells))
    if stats.probe is not None:
        shares = stats.probe.fix_ratios([stats.worker_mask(c) for _, c in candidates])
    else:
        mw = report.m_w.rem if report.m_w is not None and report.m_w.rem is not None else 0.0
        shares = [mw for _ in candidates]
    share = shares[0]
    host_share = shares[1] if len(shares) > 1 else None
    if share < MIN_SHARE:
        return None

    host_cells_hot = len(cells) >= 2 and len(cell_hosts) == 1
    spatial = Spatial.ONE_HOST if host_cells_hot else Spatial.SINGLE_WORKER
    where_cells = cells
    m_w = report.m_w.rem if report.m_w is not None else None
    n_steps = max(stats.n_steps, 1)
    # Fit: persistence, a clean hot set, and the M_W-style ratio agreeing that the few hot
    # workers hold most of the slowdown.
    fit = 0.6 + 0.25 * min(1.0, (persist - 0.5) / 0.5) + (0.15 if share >= 0.5 else 0.0)
    loc = stats.location(where_cells)
    names = ", ".join(f"dp {d}/pp {p}" for d, p in sorted(where_cells)[:6])
    more = f" and {len(where_cells) - 6} more" if len(where_cells) > 6 else ""
    host_txt = f"host {loc.hosts[0]}" if len(loc.hosts) == 1 else f"hosts {loc.hosts}"
    summary = (
        f"{'One worker' if len(where_cells) == 1 else f'{len(where_cells)} workers'} ({names}{more}; "
        f"{host_txt}) {'is' if len(where_cells) == 1 else 'are'} persistently slow: their compute runs "
        f"{peer_ratio:.2f}x their stage peers' in {persist * 100:.0f}% of the {n_steps} steps, while "
        f"the rest of the grid is cold. Idealising only {'it' if len(where_cells) == 1 else 'them'} "
        f"removes {share * 100:.0f}% of the slowdown"
        + (f" (the whole host: {host_share * 100:.0f}%)" if host_share is not None else "")
        + ". Every collective and pipeline transfer waits for this machine; check its GPU health, "
        "clocks and thermals, or drain it."
    )
    return CauseMatch(
        id=CauseId.FAULTY_MACHINE,
        confidence=confidence(share, fit),
        location=loc,
        pattern=Pattern(spatial=spatial, temporal=Temporal.PERSISTENT, resource=Resource.COMPUTE),
        evidence={
            "hot_cells": [f"{d},{p}" for d, p in sorted(where_cells)],
            "worker_slowdown_max": rounded(float(worker_matrix(report, "exact").max())),
            "peer_compute_ratio": rounded(peer_ratio),
            "persistent_step_fraction": rounded(persist),
            "fix_share_workers": rounded(share),
            "fix_share_host": rounded(host_share) if host_share is not None else None,
            "m_w": rounded(m_w) if m_w is not None else None,
        },
        summary=summary,
        categories=categories_for(CauseId.FAULTY_MACHINE),
    )
