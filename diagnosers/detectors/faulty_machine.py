"""Faulty machine: one GPU, or the GPUs of one host, persistently slow (METHOD.md A6).

Evidence, all of which must hold:
- hot cells in the per-worker slowdown matrix (S_w): cells whose excess ``S_w - 1`` is at least
  half the hottest cell's; either one or a few cells (at most a quarter of the workers, never a
  whole PP row), or exactly the traced workers of one host (``rank // gpus_per_host``; at most a
  quarter of the hosts), which may fill PP rows;
- persistence: in at least 3/4 of the steps, each hot cell's compute exceeds its stage peers'
  median by at least half its own typical excess (uniform noise moves from step to step);
- an outlier: each cell's persistent speed factor (median over steps of its compute over its
  stage peers' median) is at least ``OUTLIER_Z`` robust standard deviations (MAD) from the other
  workers' — the slowest of a normal spread of GPU speeds is not a faulty machine;
- all compute types are slow: the optimizer step too (at least a quarter of the compute excess);
  or, with lower confidence, at least 90% of the worker's forwards (or backwards) take 1.2x or
  more their stage's median — slow kernels on every microbatch, which no data imbalance or
  sporadic pause produces;
- what-if: idealising only the hot workers' compute removes at least ``MIN_SHARE`` of the
  slowdown, or putting only their compute back into the ideal run recreates that share (the
  host-level counterpart of M_W; M_W itself fixes the top 3% of workers, fewer than a host has
  in small jobs, and is reported as evidence).
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
from diagnosers.detectors.stats import BWD, FWD, OPT
from diagnosers.heatmap import worker_matrix
from diagnosers.report import WhatIfReport
from diagnosers.vocab import DECOMPOSE_THRESHOLD, CauseId, Pattern, Resource, Spatial, Temporal

PERSIST_FRACTION = 0.75
# A machine slow in only some kernels (e.g. forwards) must be slow in nearly all of them.
CONSISTENT_FRACTION = 0.9
SLOW_OP = 1.2
# A faulty machine stands outside the fleet's spread of worker speeds: its persistent speed factor
# is at least this many robust standard deviations (MAD) from the others'. Gaussian spread reaches
# 5 sigma once in ~3.5 million workers, so a slowest-of-many healthy GPU does not pass.
OUTLIER_Z = 5.0


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


def peer_reference(values: np.ndarray, cells: list[tuple[int, int]]) -> np.ndarray:
    """(S, pp) reference per step and stage: the median of ``values`` (S, dp, pp) over the workers of
    that stage outside ``cells``; over every worker outside ``cells`` when the whole stage is in it."""
    n_s, dp, pp = values.shape
    inside = np.zeros((dp, pp), dtype=bool)
    for d, p in cells:
        inside[d, p] = True
    out = np.empty((n_s, pp))
    everyone_else = values[:, ~inside] if (~inside).any() else values.reshape(n_s, -1)
    fallback = np.median(everyone_else, axis=1)
    for p in range(pp):
        peers = ~inside[:, p]
        out[:, p] = np.median(values[:, peers, p], axis=1) if peers.any() else fallback
    return out


def compute_ratios(stats: TraceStats, cells: list[tuple[int, int]]) -> np.ndarray:
    """(S, len(cells)): each cell's per-step compute over its peers' (``peer_reference``)."""
    ref = peer_reference(stats.compute, cells)
    cols = [stats.compute[:, d, p] / np.maximum(ref[:, p], 1e-12) for d, p in cells]
    return np.stack(cols, axis=1) if cols else np.zeros((stats.n_steps, 0))


def slow_cells(stats: TraceStats, cells: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The candidate cells whose own compute is slow: typical ratio to peers at least half the
    slowest cell's excess. A cell hot in S_w only because it waits on a slow neighbour drops out."""
    if not cells:
        return []
    med = np.median(compute_ratios(stats, cells), axis=0) - 1.0
    top = float(med.max())
    if top <= 0:
        return []
    return [c for c, m in zip(cells, med, strict=True) if m >= 0.5 * top]


def persistence(stats: TraceStats, cells: list[tuple[int, int]]) -> tuple[float, float]:
    """(fraction of steps in which every cell's compute excess over its peers is at least half its
    typical excess, mean compute ratio to peers). Uniform noise moves from step to step."""
    r = compute_ratios(stats, cells)
    if r.size == 0:
        return 0.0, 1.0
    typical = np.median(r, axis=0) - 1.0
    if (typical <= 0).any():
        return 0.0, float(r.mean())
    ok = ((r - 1.0) >= 0.5 * typical[None, :]).all(axis=1)
    return float(ok.mean()), float(r.mean())


def outlier_z(stats: TraceStats, cells: list[tuple[int, int]]) -> float:
    """The smallest robust z-score, over the cells, of the worker's persistent speed factor among
    the workers outside ``cells`` (inf when nothing is left to compare with).

    A worker's factor is the median over steps of its compute over the median of its stage's
    workers outside ``cells``. Every
    fleet has a spread of GPU speeds; a faulty machine is one that stands outside that spread, not
    merely the slowest of many (with 200 workers the slowest healthy one sits ~3 sigma out)."""
    comp = stats.compute
    # Stage reference without the candidates (with 2 DP ranks a slow worker is half its stage).
    ref = peer_reference(comp, cells)[:, None, :]
    factor = np.median(np.divide(comp, ref, out=np.ones_like(comp), where=ref > 0), axis=0)  # (dp, pp)
    inside = np.zeros((stats.dp, stats.pp), dtype=bool)
    for d, p in cells:
        inside[d, p] = True
    others = factor[~inside & (stats.rank_of >= 0)]
    if others.size < 2:
        return float("inf")
    med = float(np.median(others))
    # Floor the spread at 0.1%: below that, clocks and timers, not GPUs, set the differences.
    sigma = max(1.4826 * float(np.median(np.abs(others - med))), 1e-3)
    return float(min((factor[d, p] - med) / sigma for d, p in cells))


def compute_mask(stats: TraceStats, cells: list[tuple[int, int]]) -> np.ndarray:
    """Compute ops (forward, backward, optimizer) of the given workers."""
    is_compute = np.isin(stats.optype, np.array([FWD, BWD, OPT], dtype=np.int16))
    return stats.worker_mask(cells) & is_compute


def consistently_slow(stats: TraceStats, cells: list[tuple[int, int]]) -> float:
    """The smallest, over the cells, of the larger of two fractions: the cell's forwards (or its
    backwards) that take at least ``SLOW_OP`` times their (stage, chunk) median."""
    worst = 1.0
    for d, p in cells:
        best = 0.0
        for code in (FWD, BWD):
            here = (stats.optype == code) & (stats.op_dp == d) & (stats.op_pp == p)
            peers = (stats.optype == code) & (stats.op_pp == p)
            if not here.any():
                continue
            chunk = stats.op_gmc[here]
            frac = 0.0
            total = 0
            for g in np.unique(chunk):
                typical = float(np.median(stats.transfer[peers & (stats.op_gmc == g)]))
                vals = stats.transfer[here][chunk == g]
                frac += float((vals >= SLOW_OP * typical).sum())
                total += len(vals)
            best = max(best, frac / max(total, 1))
        worst = min(worst, best)
    return worst


def optimizer_ratio(stats: TraceStats, cells: list[tuple[int, int]]) -> float | None:
    """Mean optimizer time of the cells over their peers' (None without optimizer ops)."""
    if not (stats.optimizer > 0).any():
        return None
    ref = peer_reference(stats.optimizer, cells)
    vals = [float(np.mean(stats.optimizer[:, d, p] / np.maximum(ref[:, p], 1e-12))) for d, p in cells]
    return float(np.mean(vals)) if vals else None


@register(CauseId.FAULTY_MACHINE)
def detect(report: WhatIfReport, stats: TraceStats) -> CauseMatch | None:
    """Match persistently hot cells, clustered by host when a host's workers are hot together."""
    if report.slowdown < DECOMPOSE_THRESHOLD:
        return None
    candidates = hot_cells(report)
    if host_cluster(stats, candidates) is None and stats.dp >= 2:
        # Whole hot PP rows belong to the stage-imbalance detector; a machine may hide among them
        # (both causes at once), so look at the remaining cells.
        full = {r for r in range(stats.pp) if sum(1 for _, p in candidates if p == r) == stats.dp}
        candidates = [c for c in candidates if c[1] not in full]
    cells = slow_cells(stats, candidates)
    if not cells:
        return None
    n_workers = stats.dp * stats.pp
    hosts = host_cluster(stats, cells)
    rows = sorted({p for _, p in cells})
    whole_rows = [r for r in rows if sum(1 for _, p in cells if p == r) == stats.dp] if stats.dp >= 2 else []
    # Not a host: one or a few cells, and never a whole PP row (stage imbalance's signature).
    if hosts is None and (len(cells) > max(1, n_workers // 4) or whole_rows):
        return None
    persist, peer_ratio = persistence(stats, cells)
    if persist < PERSIST_FRACTION:
        return None
    z = outlier_z(stats, cells)
    if z < OUTLIER_Z:
        return None  # the slowest of a normal spread of GPU speeds, not a faulty machine
    # "All compute types on that worker are slow" (METHOD.md A6): a slow GPU also slows its
    # optimizer step, which no data or schedule imbalance touches.
    opt_ratio = optimizer_ratio(stats, cells)
    opt_slow = opt_ratio is None or opt_ratio - 1.0 >= 0.25 * (peer_ratio - 1.0)
    consistent = None if opt_slow else consistently_slow(stats, cells)
    if consistent is not None and consistent < CONSISTENT_FRACTION:
        # Neither every compute type nor every op of one type is slow: data or pauses, not a machine.
        return None

    masks = [stats.worker_mask(cells), compute_mask(stats, cells)]
    if stats.probe is not None:
        probe = stats.probe
        share, compute_share = probe.fix_ratios(masks)
        # The ``add`` view too (put only these workers' compute back into the ideal run): with
        # batched P2P (interleaved 1F1B) or a second cause on the critical path, idealising the
        # machine alone leaves the others' waits in place and under-states what it costs.
        added = probe.add_share(np.where(masks[1], probe.original, probe.ideal))
        compute_share = max(compute_share, added)
        share = max(share, added)
    else:
        mw = report.m_w if report.m_w is not None else 0.0
        share = compute_share = mw
    # The machine's compute must hold the slowdown; slow transfers are slow communication's.
    if compute_share < MIN_SHARE:
        return None

    spatial = Spatial.ONE_HOST if hosts is not None and len(cells) >= 2 else Spatial.SINGLE_WORKER
    m_w = report.m_w
    n_steps = max(stats.n_steps, 1)
    # With one traced step persistence cannot be observed (it is 1.0 trivially): no credit for it.
    one_step = stats.n_steps < 2
    persist_credit = 0.0 if one_step else 0.25 * min(1.0, (persist - 0.5) / 0.5)
    fit = 0.6 + persist_credit + (0.15 if share >= 0.5 else 0.0)
    if not opt_slow:
        fit *= 0.75  # only some compute types are slow: weaker evidence for the hardware
    ambiguous = hosts is not None and len(whole_rows) == 1 and len(rows) == 1
    if ambiguous and rows[0] in (0, stats.pp - 1):
        # The host holds exactly the first or last stage: a heavy stage looks the same. Stage
        # imbalance is far more common (METHOD.md A6), so rank it first; keep this as the alternative.
        fit *= 0.7
    loc = stats.location(cells)
    names = ", ".join(f"dp {d}/pp {p}" for d, p in sorted(cells)[:6])
    more = f" and {len(cells) - 6} more" if len(cells) > 6 else ""
    host_txt = f"host {loc.hosts[0]}" if len(loc.hosts) == 1 else f"hosts {loc.hosts}"
    one = len(cells) == 1
    summary = (
        f"{'One worker' if one else f'{len(cells)} workers'} ({names}{more}; {host_txt}"
        f"{', every traced GPU of the host' if hosts is not None and not one else ''}) "
        + (
            f"{'is' if one else 'are'} slow: compute runs {peer_ratio:.2f}x the stage peers' in the one "
            "traced step (whether it persists cannot be checked)"
            if one_step
            else f"{'is' if one else 'are'} persistently slow: compute runs {peer_ratio:.2f}x the stage "
            f"peers' in {persist * 100:.0f}% of the {n_steps} steps"
        )
        + (
            ""
            if opt_ratio is None
            else f", the optimizer step {opt_ratio:.2f}x"
            + ("" if opt_slow else " (normal: only some kernels slow)")
        )
        + f", while the rest of the grid is cold. Idealising only {'it' if one else 'them'} removes "
        f"{share * 100:.0f}% of the slowdown ({compute_share * 100:.0f}% from compute alone). Every "
        "collective and pipeline transfer waits for this machine; check its GPU health, clocks and "
        "thermals (the remedy says whether draining it is warranted)."
        + (
            f" The host holds exactly PP stage {rows[0]}, so a heavy stage would look the same."
            if ambiguous
            else ""
        )
    )
    return CauseMatch(
        id=CauseId.FAULTY_MACHINE,
        confidence=confidence(share, fit),
        location=loc,
        pattern=Pattern(spatial=spatial, temporal=Temporal.PERSISTENT, resource=Resource.COMPUTE),
        evidence={
            "hot_cells": [f"{d},{p}" for d, p in sorted(cells)],
            "host_cluster": hosts if hosts is not None else [],
            "worker_slowdown_max": rounded(float(worker_matrix(report, "exact").max())),
            "peer_compute_ratio": rounded(peer_ratio),
            "optimizer_ratio": rounded(opt_ratio) if opt_ratio is not None else None,
            "persistent_step_fraction": rounded(persist),
            "outlier_z": rounded(z, 2) if np.isfinite(z) else None,
            "consistently_slow_op_fraction": rounded(consistent) if consistent is not None else None,
            "fix_share": rounded(share),
            "fix_share_compute": rounded(compute_share),
            "m_w": rounded(m_w) if m_w is not None else None,
        },
        summary=summary,
        categories=categories_for(CauseId.FAULTY_MACHINE),
    )
