"""Sequence-length imbalance: microbatches of uneven cost (attention is quadratic in sequence
length), so a different DP rank is the slowest in each step (METHOD.md A6).

Evidence, all of which must hold:
- forward and backward durations of the same microbatch are strongly correlated (> 0.9, the
  study's number): a long sequence lengthens both passes. Each duration is first divided by its
  own worker-step median, so a persistently slow worker (which would also push the plain
  correlation toward 1, METHOD.md A6) does not count. Noise-aware: when the stages' mean is lower
  (a busy host drowns some stages' timings), one stage above 0.9 and a mean of at least 0.5 do,
  if the slowest replica moves and rebalancing removes most of the slowdown (the what-if carries
  it, at lower confidence); or the microbatches are *coherent* (``microbatch_coherence``): a
  microbatch's sequence length sets the cost of its forward and backward on every stage, so
  across those 2 x pp measurements the same microbatches are the long ones (mean pairwise rank
  correlation >= ``COHERENCE`` and >= ``COHERENCE_Z`` standard errors above the 0 that
  independent noise gives) — each measurement is noisy on a busy host, but the noise of
  different stages and passes is not shared;
- what-if: rebalancing the compute inside each (step, stage) — every forward (backward) takes the
  mean of that step's and stage's forwards (backwards) across DP ranks and microbatches, after
  dividing out each worker's persistent speed, so total work, stage means and slow machines are
  kept — removes at least ``MIN_SHARE`` of the slowdown, or putting only those per-microbatch
  deviations back into the ideal run recreates that share (the larger counts).
How freely the slowest DP replica moves from step to step is reported and raises confidence.

Not claimed on a kernel-level job (``TraceStats.microbatches`` False: a plain PyTorch trace read
without span names). Its compute ops are the segments of one forward / backward cut at the
collectives (FSDP: one per layer), not microbatches: the "same microbatch" forward / backward
pairs and the coherence across microbatches compare different parts of the model, whose costs
differ by design and agree across ranks and steps, and rebalancing them evens out the layers
(and a slow rank with them), so every measurement the cause rests on is undefined there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from diagnosers.detectors.base import (
    MIN_SHARE,
    MOST_SHARE,
    CauseMatch,
    TraceStats,
    categories_for,
    confidence,
    rounded,
    stage_groups,
)
from diagnosers.detectors.registry import register
from diagnosers.detectors.stats import BWD, FWD, _group_median
from diagnosers.npplain import median, unique
from diagnosers.readers.normalize import dense_ids
from diagnosers.vocab import DECOMPOSE_THRESHOLD, CauseId, Pattern, Resource, Spatial, Temporal

if TYPE_CHECKING:
    from diagnosers.report_view import Report

CORRELATION = 0.9
# The noise-aware path: one stage at CORRELATION, the stages' mean at least this, the slowest
# replica not the same in every step, and rebalancing removing most (MOST_SHARE) of the slowdown.
RELAXED_MEAN = 0.5
# The coherence path: the microbatches' costs agree across passes and stages at a mean pairwise
# rank correlation of at least 0.3 (a real share of each op's variation is the microbatch's own
# cost; healthy busy-host recordings stay under 0.16), and at least 4 standard errors above 0,
# with at least 8 microbatches measured.
COHERENCE = 0.3
COHERENCE_Z = 4.0
COHERENCE_MIN_ROWS = 8
# Below this many rows the rank correlations' product sums are exact (see ``_coherence``):
# (n^3 - n) / 12 in quarters stays under 2^53 up to about 300k rows.
_EXACT_RANK_ROWS = 1 << 18


def persistent_factor(stats: TraceStats) -> npt.NDArray[np.float64]:
    """(dp, pp): each worker's typical compute over its stage peers' median (median over steps).

    A slow machine is slow in every step; data imbalance is not. Dividing it out first keeps a
    faulty worker from passing for a data problem."""
    comp = stats.compute
    ref = median(comp, axis=1, keepdims=True)
    ratio = np.divide(comp, ref, out=np.ones_like(comp), where=ref > 0)
    return np.asarray(median(ratio, axis=0), dtype=np.float64)


def rebalanced_durations(stats: TraceStats) -> npt.NDArray[np.float64]:
    """Compute ops set to the mean of their (step, stage, op type), after dividing out each
    worker's persistent speed factor (restored afterwards): perfectly rebalanced microbatches
    across DP ranks and within ranks, each step's data-dependent work unchanged."""
    mask = (stats.optype == FWD) | (stats.optype == BWD)
    factor = persistent_factor(stats)[stats.op_dp, stats.op_pp]
    # Keyed by model chunk too: with VPP the chunks of a stage differ (embedding, head) by design.
    chunk = stats.op_gmc.astype(np.int64) + 1
    n_chunks = int(chunk.max(initial=0)) + 1
    keys = ((stats.op_step_index * stats.pp + stats.op_pp.astype(np.int64)) * n_chunks + chunk) * 2 + (
        stats.optype == BWD
    )
    base = stats.transfer
    normalised = np.where(mask, base / np.where(factor > 0, factor, 1.0), base)
    pooled = stage_groups(stats, mask, keys.astype(np.int64), values=normalised)
    return np.where(mask, pooled * factor, base)


def microbatch_coherence(stats: TraceStats) -> tuple[float, float]:
    """(mean pairwise rank correlation, its z-score against independence) of microbatch costs
    across the measurements of each microbatch: its forward and backward on every stage and chunk.

    Rows are (step, DP rank, microbatch), columns (stage, chunk, pass); each duration is first
    divided by the median of its worker-step, chunk and pass (a slow worker, a busy step and the
    stage's own weight drop out); with DP >= 2 then by the median over the DP ranks of the same
    (step, stage, chunk, pass, microbatch position), so a position effect every replica shares
    is not read as the microbatches' own cost (lengths differ between replicas); only complete
    rows count. Spearman correlations (ranks:
    one descheduled op cannot dominate). Under independent noise each of the K pairs has standard
    error ~1/sqrt(n - 1) over n rows, their mean ~1/sqrt((n - 1) K). (0, 0) without a microbatch
    id, on a kernel-level job (its ids are segment positions, whose costs differ by design: see
    the module docstring), with fewer than two columns or ``COHERENCE_MIN_ROWS`` rows."""
    return stats.shared("microbatch_coherence", lambda: _coherence(stats))  # asked by several detectors


def _coherence(stats: TraceStats) -> tuple[float, float]:
    """:func:`microbatch_coherence`, computed (once per trace statistics)."""
    if stats.op_mb is None or not stats.microbatches:
        return 0.0, 0.0
    # the measured passes' rows, found once and gathered by index (the forward / backward mask is
    # the statistics' shared one); the step index is int64 already and is not copied again
    rows = np.flatnonzero(stats.of_types([FWD, BWD]) & (stats.op_mb >= 0) & (stats.transfer > 0))
    if not rows.size:
        return 0.0, 0.0
    # the step index in int64, the base of every key made from these ids below (so the keys are
    # int64 whatever the others' width); the DP rank, microbatch and column in the columns' own
    # (int32) width: small ids, half the memory at the test's peak of live memory
    si = stats.op_step_index[rows].astype(np.int64, copy=False)
    d = stats.op_dp[rows]
    mb = stats.op_mb[rows]
    # each row's column (stage, chunk, pass), below (pp * chunks + chunks) * 2; its parts let go
    # once it is made
    p = stats.op_pp[rows]
    g = stats.op_gmc[rows] + 1
    b = stats.optype[rows] == BWD
    n_g = int(g.max()) + 1
    col = (p * n_g + g) * 2 + b
    del p, g, b
    n_col = int(col.max()) + 1
    v = np.log(stats.transfer[rows])
    m = _normalised_grid(si, d, stats.dp, mb, col, v)
    if m is None:
        # the grouped path's row keys, made only here (the grid needs none)
        worker_step = si * stats.dp + d
        row = worker_step * (int(mb.max()) + 1) + mb
        group = worker_step * n_col + col
        # Rows come in (step, worker) blocks of equal groups: a per-group partition, no full sort.
        v = v - _group_median(group, v)
        if stats.dp >= 2:
            # A microbatch's length is drawn per DP rank: its cost is what sets it apart from the
            # same position on the other replicas. A pattern every replica shares at a position
            # (the schedule, host contention in step with it, a slow sender delaying its
            # pipeline's microbatches in turn) is no length: the per-(step, stage, chunk, pass,
            # microbatch) median over the DP ranks is taken out before the ranks are compared.
            position = (si * n_col + col) * (int(mb.max()) + 1) + mb
            v = v - _group_median(position, v)
        # np.unique's inverses by a presence table (the ids are dense small integers)
        _, row_id = dense_ids(row)
        _, col_id = dense_ids(col)
        # laid out as the grid is, one contiguous row per column
        m = np.full((int(col_id.max()) + 1, int(row_id.max()) + 1), np.nan)
        m[col_id, row_id] = v
    complete = np.isfinite(m).all(axis=0)
    if not complete.all():
        m = m[:, complete]
    k, n = m.shape
    if k < 2 or n < COHERENCE_MIN_ROWS:
        return 0.0, 0.0
    # Each column's ranks are a permutation of 0..n-1, never constant (n >= 2): every column has a
    # correlation. Their centred values are multiples of 1/2 and each product sum is at most
    # (n^3 - n) / 12, so below ``_EXACT_RANK_ROWS`` rows the correlation's sums are exact in any
    # order and the layout handed to it cannot change a bit; above, it gets the row-major layout
    # the sums were always made in.
    ranks = _column_ranks(m)
    sums_exact = n < _EXACT_RANK_ROWS
    c = np.atleast_2d(np.corrcoef(ranks if sums_exact else np.ascontiguousarray(ranks.T).T))
    iu = np.triu_indices(c.shape[0], 1)
    mean = float(np.mean(c[iu]))
    return mean, mean * float(np.sqrt((n - 1) * len(iu[0])))


def _normalised_grid(
    si: npt.NDArray[np.int64],
    d: npt.NDArray[np.integer[Any]],
    dp: int,
    mb: npt.NDArray[np.integer[Any]],
    col: npt.NDArray[np.integer[Any]],
    v: npt.NDArray[np.float64],
) -> npt.NDArray[np.float64] | None:
    """The coherence matrix of :func:`_coherence` with both medians taken out, when its rows fill
    a complete grid: one value for every (step index, DP rank, microbatch, column), each once
    (every regular 1F1B / GPipe job); None otherwise (the grouped medians then apply).

    The matrix is laid out one contiguous row per column id, ascending (the layout the column
    ranks sort in), each holding the matrix's rows (worker-step ``si * dp + d``, microbatch) in
    ascending order, as the grouped path lays them out; on a complete grid each grouped median
    is a median along one axis of it (a worker-step's microbatches in one column; the DP ranks of
    one (step, microbatch, column)): the same groups, the same values by the same partition, and
    no grouping sort or gathers."""
    n = len(v)
    if n == 0:
        return None
    cols, col_id = dense_ids(col)
    mb_lo = int(mb.min())
    n_s, n_mb, n_c = int(si.max()) + 1, int(mb.max()) - mb_lo + 1, len(cols)
    if n != n_s * dp * n_mb * n_c:
        return None
    if int(d.min()) < 0 or int(d.max()) >= dp or int(si.min()) < 0:
        return None
    n_rows = n_s * dp * n_mb
    # each row's cell ``col_id * n_rows + (si * dp + d) * n_mb + (mb - mb_lo)``, in Horner form
    # in the inverse's own fresh int64 array, updated in place (the same integers, no
    # temporaries); every cell lies in [0, n) by the bounds above
    cell = col_id.astype(np.int64, copy=False)
    cell *= n_s
    cell += si
    cell *= dp
    cell += d
    cell *= n_mb
    cell += mb
    cell -= mb_lo
    # every cell once: n rows written into n cells leave none unwritten (still NaN) exactly when
    # no two share a cell, given no NaN among the values (a NaN there falls back too)
    m = np.full(n, np.nan)
    m[cell] = v
    del cell
    if np.isnan(m).any():
        return None
    # the worker-step's microbatches of each column: the median along the microbatch axis, the
    # grid's contiguous last one
    by_ws = m.reshape(n_c, n_s * dp, n_mb)
    by_ws -= _median_along(by_ws, 2)
    if dp >= 2:
        # the DP ranks of each (step, microbatch, column): the median along the DP axis
        by_rank = m.reshape(n_c, n_s, dp, n_mb)
        by_rank -= _median_along(by_rank, 2)
    return m.reshape(n_c, n_rows)


def _median_along(a: npt.NDArray[np.float64], axis: int) -> npt.NDArray[np.float64]:
    """The median of ``a`` along ``axis``, kept as an axis of length 1: the mean of the two middle
    values a partition finds there (one for an odd length), as ``_group_median`` computes it."""
    size = a.shape[axis]
    lo, hi = (size - 1) // 2, size // 2
    # one copy with the axis contiguous, partitioned in place at the upper middle only: every value
    # before it is no larger, so the lower middle (of an even length) is their maximum, the same
    # order statistic a second partition point finds (NaNs, sorted last by both, reach the maximum
    # exactly when they reach the lower middle)
    mid = np.moveaxis(a, axis, -1).copy(order="C")
    mid.partition(hi, axis=-1)
    upper = mid[..., hi]
    lower = mid[..., :hi].max(axis=-1) if lo < hi else upper
    return np.expand_dims((lower + upper) / 2, axis)


def _column_ranks(m: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``np.argsort(np.argsort(m, axis=1), axis=1)`` as floats for the coherence matrix laid out
    one contiguous row per column (``m`` is (columns, matrix rows)): each value's rank among its
    column's values, in the same layout. The inverse of the sorting permutation is scattered
    instead of found by a second sort."""
    k, n = m.shape
    order = np.argsort(m, axis=1)
    ranks = np.empty((k, n), dtype=np.float64)
    positions = np.arange(n, dtype=np.float64)
    for column in range(k):  # a row scatter each: the few columns' loop beats put_along_axis
        ranks[column, order[column]] = positions
    return ranks


def slowest_replica(stats: TraceStats) -> tuple[npt.NDArray[np.int64], float, npt.NDArray[np.float64]]:
    """Per step, the DP rank with the most compute summed over stages; the share of steps taken by
    the most frequent one; and per step the slowest replica's compute over the median replica's."""
    per_replica = stats.compute.sum(axis=2)  # (S, dp)
    slowest = per_replica.argmax(axis=1)
    counts = np.bincount(slowest, minlength=stats.dp)
    mode_fraction = float(counts.max() / max(len(slowest), 1))
    med = median(per_replica, axis=1)
    ratio = per_replica.max(axis=1) / np.maximum(med, 1e-12)
    return slowest.astype(np.int64), mode_fraction, ratio


@register(CauseId.SEQUENCE_LENGTH_IMBALANCE)
def detect(report: Report, stats: TraceStats) -> CauseMatch | None:
    """Match warm DP ranks whose slowest member moves, with correlated fwd/bwd microbatch costs."""
    if report.slowdown < DECOMPOSE_THRESHOLD or stats.dp < 2 or stats.n_steps < 2 or not stats.microbatches:
        return None
    slowest, mode_fraction, ratio = slowest_replica(stats)
    corr = [c for c in stats.fwd_bwd_corr_within.values() if np.isfinite(c)]
    corr_mean = float(np.mean(corr)) if corr else 0.0
    corr_best = float(max(corr)) if corr else 0.0
    # Noise-aware: on a busy host one stage's timings can be drowned in scheduling noise while
    # another's still show the mark. Then the what-if evidence must carry the finding (below).
    relaxed = corr_mean < CORRELATION
    coherence, coherence_z = microbatch_coherence(stats) if relaxed else (float("nan"), float("nan"))
    coherent = relaxed and coherence >= COHERENCE and coherence_z >= COHERENCE_Z
    one_stage = corr_best >= CORRELATION and corr_mean >= RELAXED_MEAN and mode_fraction < 1.0
    if relaxed and not (one_stage or coherent):
        return None
    if stats.probe is not None:
        # shared with the remedy and the marginal gain, which run the same scenario
        balanced = stats.cached("rebalanced_durations", lambda: rebalanced_durations(stats))
        # Put back only the per-microbatch deviations from the rebalanced value into the ideal run.
        # (Its own name: ``ratio`` holds the per-step slowest/median replica ratio reported below.)
        deviation = np.divide(stats.probe.original, balanced, out=np.ones_like(balanced), where=balanced > 0)
        rem, add = stats.probe.shares(balanced, stats.probe.ideal * deviation)  # one batch of runs
        share = max(rem, add)
    else:
        share = min(1.0, float(np.mean(ratio)) - 1.0)
    # One stage's correlation alone is weak evidence: then the what-if must carry most of it.
    if share < (MOST_SHARE if relaxed and not coherent else MIN_SHARE):
        return None
    distinct = len(unique(slowest))
    # Fit: how strongly fwd/bwd agree above the 0.9 bar and how freely the slow rank moves.
    fit = 0.7 + 0.15 * min(1.0, max(corr_mean - CORRELATION, 0.0) / 0.08) + 0.15 * (1.0 - mode_fraction)
    if relaxed:
        fit *= 0.8  # only some stages show the fwd/bwd mark
    cells = [(d, p) for d in range(stats.dp) for p in range(stats.pp)]
    summary = (
        f"Compute is uneven across DP ranks and the slowest replica changes from step to step "
        f"({distinct} different DP ranks were slowest over {stats.n_steps} steps; the slowest replica "
        f"averages {float(np.mean(ratio)):.2f}x the median one). Forward and backward times of the same "
        f"microbatch are correlated at {corr_mean:.3f}"
        + (
            f" (drowned by timing noise; but across passes and stages the same microbatches are the "
            f"long ones: rank correlation {coherence:.2f}, {coherence_z:.1f} standard errors above "
            f"independent noise)"
            if coherent
            else ""
        )
        + ", the mark of variable sequence lengths (a long "
        f"sequence slows both passes) rather than a machine or a pause. Rebalancing the microbatches "
        f"(same work per step, spread evenly) removes {share * 100:.0f}% of the slowdown."
    )
    return CauseMatch(
        id=CauseId.SEQUENCE_LENGTH_IMBALANCE,
        confidence=confidence(share, fit),
        location=stats.location(cells),
        pattern=Pattern(spatial=Spatial.RANDOM_DP, temporal=Temporal.PERSISTENT, resource=Resource.COMPUTE),
        evidence={
            "fwd_bwd_correlation": rounded(corr_mean),
            "fwd_bwd_correlation_stage_level": [
                rounded(stats.fwd_bwd_corr[s]) for s in sorted(stats.fwd_bwd_corr)
            ],
            "fwd_bwd_correlation_by_stage": [
                rounded(stats.fwd_bwd_corr_within[s]) for s in sorted(stats.fwd_bwd_corr_within)
            ],
            "slowest_dp_mode_fraction": rounded(mode_fraction),
            "distinct_slowest_dp_ranks": distinct,
            "slowest_over_median_replica": rounded(float(np.mean(ratio))),
            "rebalance_share": rounded(share),
            "microbatch_coherence": rounded(coherence) if np.isfinite(coherence) else None,
            "microbatch_coherence_z": rounded(coherence_z, 2) if np.isfinite(coherence_z) else None,
            "slowest_dp_rank_per_step": [int(x) for x in slowest[:64]],
        },
        summary=summary,
        categories=categories_for(CauseId.SEQUENCE_LENGTH_IMBALANCE),
    )
