"""Stage imbalance: one pipeline stage (usually the last, with the loss/logits layer; or the first,
with the embedding) carries more work than the others (METHOD.md A6).

Evidence, all of which must hold:
- the stage's put-back S_stage is the largest and its M_S-style ratio (``m_s_by_stage``: idealise
  every op of that stage) is large — the stage is where the slowdown lives;
- the whole PP row is heavy, not one cell: every DP rank of the stage carries at least half the
  compute excess of the typical (median) one, measured against the other stages' compute; DP
  ranks running ``ROW_OUTLIER`` times the rest of the row (a slow machine on the stage) are set
  aside first, and then the rest must be ``ROW_HEAVY`` heavier on its own — and, on a middle stage
  the partition gives no more layers, hold at least two DP ranks (one worker's compute is what
  host contention moves, not a stage's weight);
- persistent: in at least 3/4 of the steps the row's typical DP rank carries at least half its
  typical excess (a partition is heavy in every step; pauses or data are not); with a slow machine
  set aside, read on the rest of the row alone unless the partition gives the stage more layers
  (a slow worker's peer, hot in a few busy-host steps, is no stage's weight);
- the row is not a slow host in disguise: a middle stage that is exactly one host's workers, or a
  row whose host(s) also hold other hot workers that are slow in their own compute too (not only
  waiting), is left to the faulty-machine detector;
- both passes heavier: the stage's mean backward excess (vs the other stages) is at least a quarter
  of its forward excess — extra layers or a head cost backward time too, a forward-only excess is
  a pause;
- what-if: scaling only that stage's compute to the job-wide typical per-op-type duration (per model
  chunk), keeping every within-chunk variation, removes at least ``MIN_SHARE`` of the slowdown, or
  putting only that imbalance back into the ideal run recreates that share (the larger counts);
  beside a larger cause, at least ``SECONDARY_EFFECT`` (5%) of the ideal step (``real_share``).
  That isolates the between-stage part from, say, sequence-length noise living on the same stage.

Under ``DECOMPOSE_THRESHOLD`` only an uneven partition is read (``_hidden_partition``): the stage
``layers_per_stage`` gives more layers, its compute following them, its row heavy by the tests
above and its own balancing run at least ``HIDDEN_PARTITION_GAIN`` faster; the method's S can sit
near 1 there because the ideal run's typical op lengthens the lighter stages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from diagnosers.detectors.base import (
    CauseMatch,
    TraceStats,
    categories_for,
    confidence,
    host_cluster,
    real_share,
    rounded,
)
from diagnosers.detectors.peers import median_of_others, partition_explains
from diagnosers.detectors.registry import register
from diagnosers.detectors.stats import BWD, FWD
from diagnosers.heatmap import worker_matrix
from diagnosers.npplain import median, unique
from diagnosers.vocab import DECOMPOSE_THRESHOLD, CauseId, Pattern, Resource, Spatial, Temporal

if TYPE_CHECKING:
    from diagnosers.report_view import Report

# As for a faulty machine: the stage must be heavy in at least 3/4 of the steps.
PERSIST_FRACTION = 0.75
# Extra work on a stage lengthens its backwards too: their relative excess must be at least this
# share of the forwards' (ST's loss head: 0.85x the forward's extra time over a 2x backward = 0.43).
BWD_SHARE = 0.25
# A DP rank running 1.25x the rest of its row is a machine on the stage, not the stage's weight.
ROW_OUTLIER = 1.25
# ... and the rest of the row must then carry at least 10% more compute than the other stages.
ROW_HEAVY = 0.1
# Under the decomposition threshold a partition is read only when balancing its heavy stage alone
# makes the step at least this much faster: the 5% that makes a cause "clear" (docs/ACCURACY.md).
HIDDEN_PARTITION_GAIN = 1.05


def balanced_stage_durations(stats: TraceStats, stage: int) -> np.ndarray:
    """Original durations with ``stage``'s forward/backward compute scaled so that, per op type and
    model chunk, its mean equals the ideal (job-wide typical) mean of those ops, keeping the
    variation inside each chunk.

    Per chunk because the model chunk is the unit a pipeline places (with interleaved 1F1B a stage
    holds ``vpp`` chunks and the embedding or head lives in one of them): scaling the stage as a
    whole would shrink its normal chunks and leave the heavy one heavy. Without VPP a stage is one
    chunk, so this is the stage's per-type mean."""
    assert stats.probe is not None
    d = stats.probe.original.copy()
    on_stage = stats.op_pp == stage
    for code in (FWD, BWD):
        of_type = (stats.optype == code) & on_stage
        for g in unique(stats.op_gmc[of_type]):
            m = of_type & (stats.op_gmc == g)
            mean_here = d[m].mean()
            target = stats.probe.ideal[m].mean()
            if mean_here > 0:
                d[m] *= target / mean_here
    return d


def _own_compute_ratio(stats: TraceStats, comp: np.ndarray, cells: list[tuple[int, int]]) -> list[float]:
    """Each cell's mean compute over the median of its stage peers outside ``cells`` (or, for a
    whole row, of every worker off the cells' hosts): how slow the worker is in its *own* work,
    waits excluded."""
    inside = np.zeros((stats.dp, stats.pp), dtype=bool)
    for d, p in cells:
        inside[d, p] = True
    hs = {int(stats.host_of[d, p]) for d, p in cells}
    off_hosts = ~np.isin(stats.host_of, list(hs)) & (stats.rank_of >= 0)
    # A whole row on the host has no stage peer off it: compare with every worker off the hosts.
    fallback = float(median(comp[off_hosts])) if off_hosts.any() else float("nan")
    out = []
    for d, p in cells:
        peers = comp[~inside[:, p], p]
        ref = float(median(peers)) if peers.size else fallback
        out.append(comp[d, p] / ref if ref > 0 else float("nan"))
    return out


def _hot_cells_on_hosts(
    stats: TraceStats, report: Report, cells: list[tuple[int, int]]
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


def _row_outliers(row: np.ndarray) -> np.ndarray:
    """DP ranks of a row whose compute is at least ``ROW_OUTLIER`` times the median of the others
    (leave-one-out): a slow machine on the stage, not the stage's own weight."""
    if len(row) < 2:
        return np.zeros(len(row), dtype=bool)
    others = median_of_others(row[None, :])[0]
    out = row >= ROW_OUTLIER * others
    return out if not out.all() else np.zeros(len(row), dtype=bool)


def _row_without(compute: np.ndarray, hot: int, outliers: np.ndarray) -> np.ndarray:
    """``compute`` (S, dp, pp) with the ``outliers`` DP ranks of stage ``hot`` replaced, step by
    step, by the median of the row's other DP ranks: the stage as it runs without its slow
    machine(s). Unchanged when there is no outlier, or nothing else is left in the row."""
    if not outliers.any() or outliers.all():
        return compute
    out = compute.copy()
    out[:, outliers, hot] = median(compute[:, ~outliers, hot], axis=1)[:, None]
    return out


def _more_layers(stats: TraceStats, stage: int) -> bool:
    """Whether the job's ``layers_per_stage`` (when known, one entry per stage) gives ``stage``
    more layers than the median of the other stages."""
    layers = stats.layers_per_stage
    if layers is None or len(layers) != stats.pp:
        return False
    return bool(layers[stage] > float(median(np.delete(np.asarray(layers, dtype=np.float64), stage))))


def _known_heavy(stats: TraceStats, stage: int) -> bool:
    """Whether a known mechanism can make ``stage`` heavier than the others: it is the first or
    the last stage (the embedding; the head and the loss), or the job's ``layers_per_stage`` gives
    it more layers than the median stage."""
    return stage in (0, stats.pp - 1) or _more_layers(stats, stage)


def _heavy_row(
    stats: TraceStats, report: Report, comp: np.ndarray, hot: int
) -> tuple[float, float, list[int] | None] | None:
    """(typical, max row ratio, host cluster or None) when stage ``hot``'s whole row is heavy."""
    others = np.delete(comp, hot, axis=1)
    ref = float(median(others)) if others.size else 0.0
    if ref <= 0:
        return None
    row = comp[:, hot] / ref
    row_max = float(row.max())
    # A slow machine inside the row (a faulty worker on the heavy stage) is not part of the
    # stage's level: with 2 DP ranks it would be half the median. Judge the row without the DP
    # ranks that stand out of it on their own (leave-one-out, ``ROW_OUTLIER``).
    outliers = _row_outliers(row)
    row = row[~outliers]
    row_typical, row_min = float(median(row)), float(row.min())
    if outliers.any() and row_typical - 1.0 < ROW_HEAVY:
        # Without its slow machine the stage must still be clearly heavy on its own: a machine's
        # waiting peers are not a heavy stage.
        return None
    if outliers.any() and len(row) < 2 and not _known_heavy(stats, hot):
        # With its slow machine set aside, one DP rank is left to show the stage's level: one
        # worker's compute is what contention on a busy host (or the slow machine's own pull on
        # it) moves, not a stage's weight. Accepted only where a mechanism makes the stage heavy:
        # the first or last stage (embedding, head and loss) or more layers in the partition.
        return None
    # Every DP rank of the row carries the excess (at least half the typical rank's), so a single
    # hot cell — or one hot cell among two DP ranks — is not a heavy stage.
    if row_typical <= 1.0 or (row_min - 1.0) < 0.5 * (row_typical - 1.0):
        return None
    # Persistent: a partition makes the stage heavy in every step; pauses or data make it heavy in
    # some. Per step, the row's typical DP rank must carry at least half the typical excess. With
    # a slow machine set aside, the rest of the row alone must do so where no partition gives the
    # stage more layers: otherwise the machine, slow in every step, keeps the row's per-step median
    # high (with DP 2 it is half of it) and its peer's few busy-host steps read as a stage's weight
    # (a weight is there in every step, on every DP rank). Where the partition gives the stage more
    # layers, the layer count is the evidence of the weight, and the whole row is read as before.
    rest_only = bool(outliers.any()) and not _more_layers(stats, hot)
    per_step = (_row_without(stats.compute, hot, outliers) if rest_only else stats.compute)[:, :, hot]
    others_step = median(np.delete(stats.compute, hot, axis=2).reshape(stats.n_steps, -1), axis=1)
    step_ratio = median(per_step, axis=1) / np.maximum(others_step, 1e-12)
    if float(np.mean(step_ratio - 1.0 >= 0.5 * (row_typical - 1.0))) < PERSIST_FRACTION:
        return None
    row_cells = [(d, hot) for d in range(stats.dp)]
    hosts = host_cluster(stats, row_cells)
    if hosts is None:
        # The row may share its host(s) with other hot workers: then the host, not the stage, is hot.
        # A slow host makes its other workers slow in their *own* compute (vs their stage peers); a
        # heavy stage makes them only wait, which S_w alone cannot tell apart (interleaved schedules
        # put those waits into batched transfers), so require the own-compute excess too.
        on_hosts = _hot_cells_on_hosts(stats, report, row_cells)
        off_row = [c for c in on_hosts if c[1] != hot]
        if off_row and host_cluster(stats, on_hosts) is not None:
            own = _own_compute_ratio(stats, comp, off_row)
            if all(np.isfinite(r) and r - 1.0 >= 0.5 * (row_typical - 1.0) for r in own):
                return None
    elif hot not in (0, stats.pp - 1) and not partition_explains(
        _row_without(stats.compute, hot, outliers), stats.layers_per_stage, [hot]
    ):
        # A middle stage that is exactly one host's workers: a heavy middle stage is not a known
        # signature, a slow host is — unless the partition gives it more layers and its compute
        # follows the layer count (Megatron's usual layout makes every stage host-aligned). The
        # layer count is read from the row without its slow machine: a faulty GPU on the heavy
        # stage is that worker's excess, not the partition's.
        return None
    return row_typical, row_max, hosts


def _hidden_partition(
    report: Report, stats: TraceStats, by_stage: dict[int, float], comp: np.ndarray
) -> tuple[int, tuple[float, float, list[int] | None], float] | None:
    """(stage, its ``_heavy_row`` reading, the balancing gain) for a partition the method's S
    does not see: a job under ``DECOMPOSE_THRESHOLD`` whose ``layers_per_stage`` gives a stage more
    layers than the median stage, whose compute follows that layer count (``partition_explains``),
    whose whole row is heavy by every ``_heavy_row`` test, and whose own balancing run (its
    forwards and backwards scaled to the job-wide typical, ``balanced_stage_durations``) makes the
    step at least ``HIDDEN_PARTITION_GAIN`` faster. None otherwise.

    Why S can miss it: the ideal run gives every op its type's typical duration across all stages,
    so with one heavy stage of several the ideal lengthens the lighter stages about as much as it
    shortens the heavy one, and S reads near 1 although balancing the heavy stage alone gains a
    clear amount. The layer count is the evidence here (a mechanism that makes the stage heavy in
    proportion to its layers, on every DP rank); without a partition nothing is read under the
    threshold, so no job with even stages (every healthy one) can match here."""
    layers = stats.layers_per_stage
    probe = stats.probe
    if probe is None or layers is None or len(layers) != stats.pp:
        return None
    for hot in sorted(by_stage, key=lambda s: -by_stage[s]):
        if by_stage[hot] <= 1.0:
            return None
        if not _more_layers(stats, hot) or not partition_explains(stats.compute, layers, [hot]):
            continue
        row_info = _heavy_row(stats, report, comp, hot)
        if row_info is None:
            continue
        gain = probe.speedup(balanced_stage_durations(stats, hot))
        if gain >= HIDDEN_PARTITION_GAIN:
            return hot, row_info, gain
    return None


@register(CauseId.STAGE_IMBALANCE)
def detect(report: Report, stats: TraceStats) -> CauseMatch | None:
    """Match a hot PP row; None when the job is not slowed or no stage stands out. Under
    ``DECOMPOSE_THRESHOLD`` only a partition the method's S hides is read (``_hidden_partition``)."""
    if stats.pp < 2:
        return None
    by_stage = {int(k): v for k, v in report.attribution.by_stage.items()}
    if not by_stage:
        return None
    comp = stats.compute.mean(axis=0)  # (dp, pp)
    hidden_gain: float | None = None
    if report.slowdown < DECOMPOSE_THRESHOLD:
        hidden = _hidden_partition(report, stats, by_stage, comp)
        if hidden is None:
            return None
        hot, row_info, hidden_gain = hidden
    else:
        # Stages in order of their put-back; the first whose whole row is heavy is the candidate (a
        # faulty worker can make another stage's put-back larger without its row being heavy).
        for hot in sorted(by_stage, key=lambda s: -by_stage[s]):
            if by_stage[hot] <= 1.0:
                return None
            found = _heavy_row(stats, report, comp, hot)
            if found is not None:
                row_info = found
                break
        else:
            return None
    row_typical, row_max, hosts = row_info
    m_s = report.m_s_by_stage.get(str(hot))

    if hidden_gain is not None:
        # Under the threshold the gap to the ideal run is no measure of the stage's cost (its
        # shares of that gap run far over 1): the share is the part of the measured step that
        # balancing the stage alone saves.
        share = 1.0 - 1.0 / hidden_gain
    elif stats.probe is not None:
        balanced = balanced_stage_durations(stats, hot)
        # And the artifact's ``add`` view: put only the stage's imbalance (its ops' ratio to the
        # balanced value) back into the ideal run. With batched P2P (interleaved 1F1B) the transfers
        # absorb the waits for the heavy stage, so idealising compute alone under-states its share.
        ratio = np.divide(stats.probe.original, balanced, out=np.ones_like(balanced), where=balanced > 0)
        rem, add = stats.probe.shares(balanced, stats.probe.ideal * ratio)  # one batch of runs
        share = max(rem, add)
    else:
        share = m_s if m_s is not None else 0.0
    if hidden_gain is None and not real_share(share, stats.probe):
        return None

    others_f = np.delete(stats.stage_fwd_mean, hot)
    others_b = np.delete(stats.stage_bwd_mean, hot)
    fwd_ratio = stats.stage_fwd_mean[hot] / others_f.mean() if others_f.mean() > 0 else float("nan")
    bwd_ratio = stats.stage_bwd_mean[hot] / others_b.mean() if others_b.mean() > 0 else float("nan")
    if fwd_ratio > 1.0 and bwd_ratio - 1.0 < BWD_SHARE * (fwd_ratio - 1.0):
        # Only the forwards are longer: a pause inside the forward (GC) does that, extra layers do
        # not (a layer's backward costs about twice its forward; the lightest known extra work, the
        # loss head in the study's ST trace, still shows a backward 0.85x its forward).
        return None
    second = max((v for s, v in by_stage.items() if s != hot), default=1.0)
    # Fit: how clearly the stage dominates the put-backs, and whether idealising the stage (M_S)
    # agrees that most of the slowdown sits there.
    dominance = min(1.0, (by_stage[hot] - 1.0) / max(report.slowdown - 1.0, 1e-9))
    # (under the threshold M_S is a share of a gap near zero: it says nothing about the stage)
    m_s_agrees = hidden_gain is None and (m_s or 0.0) >= 0.5
    fit = 0.7 + 0.15 * dominance + (0.15 if m_s_agrees else 0.0)
    if second > 1.0 and (second - 1.0) > 0.5 * (by_stage[hot] - 1.0):
        fit -= 0.2  # a second stage is nearly as hot: the row is not a clean single-stage signature
    layers = stats.layers_per_stage
    stage_comp = stats.compute.mean(axis=(0, 1))
    explained = False
    if layers is not None and min(layers) > 0:
        per_layer = stage_comp / np.asarray(layers, dtype=np.float64)
        # The partition explains the heavy stage when its compute per layer is like the others'.
        explained = bool(per_layer[hot] <= 1.1 * float(median(np.delete(per_layer, hot))))
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
    if hidden_gain is not None:
        summary = (
            f"Pipeline stage {hot} ({where} stage) is heavier than the others: the partition gives it "
            f"{stats.layers_per_stage[hot] if stats.layers_per_stage else '?'} layers and its compute "
            f"follows the layer count (forward {fwd_ratio:.2f}x, backward {bwd_ratio:.2f}x the other "
            f"stages', typical DP rank {row_typical:.2f}x their compute). Balancing only that stage makes "
            f"the step x{hidden_gain:.3f} faster, although S = {report.slowdown:.3f}: the ideal run gives "
            f"every op its type's typical duration across all stages, which lengthens the lighter stages "
            f"about as much as it shortens this one, so S does not measure the partition's cost."
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
            **({"hidden_by_s_gain": rounded(hidden_gain)} if hidden_gain is not None else {}),
        },
        summary=summary,
        categories=categories_for(CauseId.STAGE_IMBALANCE),
    )
