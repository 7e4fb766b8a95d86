"""What a set of workers costs the job: the share of the slowdown their ops (or their compute)
remove when idealised, and their optimizer time against their peers'. Shared by the detectors that
judge one worker's own slowness (``faulty_machine``, ``fast_step``), so that neither imports the
other for them."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from diagnosers.detectors.base import TraceStats
from diagnosers.detectors.peers import peer_reference
from diagnosers.detectors.stats import BWD, FWD, OPT
from diagnosers.npplain import median

if TYPE_CHECKING:
    from diagnosers.report_view import Report


def compute_mask(stats: TraceStats, cells: list[tuple[int, int]]) -> np.ndarray:
    """Compute ops (forward, backward, optimizer) of the given workers."""
    is_compute = stats.of_types([FWD, BWD, OPT])
    return stats.worker_mask(cells) & is_compute


def optimizer_ratio(
    stats: TraceStats, cells: list[tuple[int, int]], affected: np.ndarray | None = None
) -> float | None:
    """Median over the ``affected`` steps of the cells' optimizer time over their peers' (the cells
    left out; None without optimizer ops). The median, because on a busy host one descheduled
    optimizer step can be ten times its peers'."""
    if not (stats.optimizer > 0).any():
        return None
    opt = stats.optimizer if affected is None else stats.optimizer[affected]
    ref = peer_reference(opt, cells)
    vals = [float(median(opt[:, d, p] / np.maximum(ref[:, p], 1e-12))) for d, p in cells]
    return float(np.mean(vals)) if vals else None


def worker_shares(stats: TraceStats, report: Report, cells: list[tuple[int, int]]) -> tuple[float, float]:
    """(share of the slowdown removed by idealising the cells' ops, the same for their compute):
    the larger of the ``rem`` and ``add`` views (M_W without a probe)."""
    masks = [stats.worker_mask(cells), compute_mask(stats, cells)]
    if stats.probe is None:
        mw = report.m_w if report.m_w is not None else 0.0
        return mw, mw
    probe = stats.probe
    gap = probe.t_orig - probe.t_ideal
    if gap <= 1e-12 * max(probe.t_orig, 1e-12):
        return 0.0, 0.0
    # The ``add`` view too (put only these workers' compute back into the ideal run): with
    # batched P2P (interleaved 1F1B) or a second cause on the critical path, idealising the
    # machine alone leaves the others' waits in place and under-states what it costs. The three
    # scenarios in one batch of runs.
    t_rem, t_rem_compute, t_add = probe.mixed_means([masks[0], masks[1], masks[1]], [True, True, False])
    share, compute_share = float((probe.t_orig - t_rem) / gap), float((probe.t_orig - t_rem_compute) / gap)
    added = float((t_add - probe.t_ideal) / gap)
    return max(share, added), max(compute_share, added)
