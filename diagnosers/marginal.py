"""Marginal gain of each matched cause: the job speedup if only that cause were fixed.

"Fixed" changes only the ops the cause acts on and keeps everything else as measured, so two
overlapping causes (a slow worker on an already heavy stage) are each credited with what removing
it alone would buy, not with the other's share:

- stage imbalance: the heavy stage's forwards and backwards scaled to the other stages' typical
  weight per op type, each op's own variation kept (a slow worker there stays slow); the stage's
  own weight is read from its typical DP rank without the steps in which a faulty machine reported
  beside it runs slow there (that excess is the machine's cause, not the stage's weight); with
  model chunks, the detector's per-chunk balance to the job-wide typical;
- faulty machine: each hot worker's compute scaled down to its stage peers' median (the stage's
  own weight is kept, so a slow worker on a heavy stage goes back to the heavy stage's pace);
- sequence-length imbalance: forwards/backwards rebalanced (as the remedy, an upper bound);
- GC pause: the paused forwards without their pauses (the remedy minus its planned collection);
- slow communication / dataloader stall: the remedy's own what-if run (it fixes only that cause).

Speedups are ``T_now / T_after`` over mean simulated step times with launch delay 0, except the
dataloader stall, which lives in launch delays and is measured against the measured step time.
When a dataloader stall is among the causes, the other causes' runs keep the stall
(``launch_basis``, ``stall_delays``: its idle gaps before the stalled workers' first forwards, as
launch delays, and no other): "every other cause as it is" includes the stall, which a run with
launch delay 0 removes along with the cause it fixes, crediting that cause with the stall's time.
Keeping every measured launch delay instead would replay the waits the fixed cause made too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from diagnosers.detectors.base import CauseMatch, Probe, TraceStats
from diagnosers.npplain import median, unique
from diagnosers.remedies import Remedy
from diagnosers.vocab import CauseId

if TYPE_CHECKING:
    from diagnosers.whatif import WhatIfEngine

Arr = npt.NDArray[np.float64]


def _hot_cells(match: CauseMatch) -> list[tuple[int, int]]:
    hot = match.evidence.get("hot_cells")
    if isinstance(hot, list):
        return [(int(str(x).split(",")[0]), int(str(x).split(",")[1])) for x in hot]
    return [(d, p) for d in match.location.dp_ranks for p in match.location.pp_ranks]


def worker_at_peer_pace(stats: TraceStats, probe: Probe, cells: Sequence[tuple[int, int]]) -> Arr:
    """Original durations with each cell's compute divided by its persistent speed factor (median
    over steps of its compute over its stage peers' median), when that factor is above 1."""
    from diagnosers.detectors.faulty_machine import compute_ratios
    from diagnosers.detectors.worker_cost import compute_mask

    d = probe.original.copy()
    cl = list(cells)
    if not cl:
        return d
    factors = median(compute_ratios(stats, cl), axis=0)
    for cell, f in zip(cl, factors, strict=True):
        if f > 1.0:
            m = compute_mask(stats, [cell])
            d[m] = d[m] / f
    return d


def machine_ops(stats: TraceStats, matches: Sequence[CauseMatch]) -> npt.NDArray[np.bool_]:
    """Per op: whether it runs on a worker a faulty-machine match names (its hot cells) in a step
    that match says the worker is slow in (``evidence['affected_steps']``: from its onset on; every
    step when the match gives none, a persistent machine)."""
    out = np.zeros(len(stats.optype), dtype=bool)
    for m in matches:
        if m.id is not CauseId.FAULTY_MACHINE:
            continue
        affected = m.evidence.get("affected_steps")
        if isinstance(affected, list) and affected:
            slow = np.flatnonzero(np.isin(stats.steps, [int(str(x)) for x in affected]))
            steps = np.isin(stats.op_step_index, slow)
        else:
            steps = np.ones(len(out), dtype=bool)
        for d, p in _hot_cells(m):
            out |= steps & (stats.op_dp == d) & (stats.op_pp == p)
    return out


def stage_at_peer_weight(
    stats: TraceStats, probe: Probe, stage: int, machine: npt.NDArray[np.bool_] | None = None
) -> Arr | None:
    """Original durations with ``stage``'s forwards and backwards scaled, per op type, so that
    the stage's typical (median) DP rank's mean equals the median over the other stages of that
    type's mean; each op's variation (a slow worker on the stage) is kept. ``machine``: ops of a
    faulty machine reported beside the stage (``machine_ops``), left out of the DP ranks' means
    that set the stage's weight (a DP rank with none left out of the median). None with model
    chunks (interleaved pipelines), where the detector's per-chunk balance is used instead, or with
    fewer than two stages."""
    from diagnosers.detectors.stats import BWD, FWD

    gmc = stats.op_gmc
    if stats.pp < 2 or ((gmc >= 0).any() and len(unique(gmc[gmc >= 0])) > stats.pp):
        return None
    d = probe.original.copy()
    for code in (FWD, BWD):
        of_type = stats.optype == code
        on = of_type & (stats.op_pp == stage)
        if not on.any():
            continue
        means = [float(d[of_type & (stats.op_pp == p)].mean()) for p in range(stats.pp)
                 if p != stage and (of_type & (stats.op_pp == p)).any()]
        # The stage's typical DP rank, so a slow worker on it does not set the stage's weight. With
        # DP 2 the median is the mean of the two ranks, half of a slow machine's excess: the steps a
        # faulty machine reported beside the stage is slow in are its cause's, not the stage's
        # weight, and are left out (its normal steps, before an onset, still show the stage).
        own = on & ~machine if machine is not None and (on & ~machine).any() else on
        here = float(median([d[own & (stats.op_dp == r)].mean() for r in range(stats.dp)
                                if (own & (stats.op_dp == r)).any()]))
        if means and here > 0:
            factor = float(median(means)) / here
            if factor < 1.0:
                d[on] *= factor
    return d


def _fixed_durations(
    match: CauseMatch, stats: TraceStats, probe: Probe, others: Sequence[CauseMatch] = ()
) -> tuple[Arr, str] | None:
    if match.id is CauseId.STAGE_IMBALANCE and isinstance(match.evidence.get("stage"), int):
        from diagnosers.detectors.stage_imbalance import balanced_stage_durations

        stage = int(match.evidence["stage"])  # type: ignore[arg-type]
        # a faulty machine on another stage sets no DP rank's weight here: only the stage's own
        machine = machine_ops(stats, others) & (stats.op_pp == stage)
        peer = stage_at_peer_weight(stats, probe, stage, machine if machine.any() else None)
        if peer is not None:
            return peer, (
                f"stage {stage}'s forwards and backwards scaled to the other stages' typical weight"
                + (" (read without the slow steps of the faulty machine on it)" if machine.any() else "")
                + ", every other op as measured"
            )
        return balanced_stage_durations(stats, stage), (
            f"stage {stage}'s compute balanced to the job-wide typical, every other op as measured"
        )
    if match.id is CauseId.FAULTY_MACHINE:
        cells = _hot_cells(match)
        return worker_at_peer_pace(stats, probe, cells), (
            f"the compute of {len(cells)} slow worker(s) scaled to their stage peers' pace, every "
            "other op as measured"
        )
    if match.id is CauseId.SEQUENCE_LENGTH_IMBALANCE:
        from diagnosers.detectors.sequence_length import rebalanced_durations

        # the detector's and the remedy's scenario, shared (run once)
        balanced = stats.cached("rebalanced_durations", lambda: rebalanced_durations(stats))
        return balanced, "forward/backward cost rebalanced across DP ranks"
    if match.id is CauseId.GC_PAUSE:
        from diagnosers.detectors.gc_pause import paused_durations, paused_forwards

        return paused_durations(stats, paused_forwards(stats)), "the paused forwards without their pauses"
    return None


Planned = list[tuple[int, Arr, str]]


def marginal_scenarios(matches: Sequence[CauseMatch], stats: TraceStats) -> Planned:
    """Per match with a dedicated run: ``(its index, the fixed durations (read-only), what the run
    changes)``. Made before the remedies, so that :meth:`Probe.ahead` can let these runs ride
    along with the remedies' own batch of what-if runs."""
    probe = stats.probe
    out: Planned = []
    if probe is None:
        return out
    for i, m in enumerate(matches):
        fixed = _fixed_durations(m, stats, probe, [o for j, o in enumerate(matches) if j != i])
        if fixed is not None:
            vector = fixed[0]
            if vector.flags.writeable:  # (a shared scenario is read-only already: keep its identity)
                vector = vector.view()  # read-only: nobody changes a scenario planned to run later
                vector.flags.writeable = False
            out.append((i, vector, fixed[1]))
    return out


def marginal_gains(
    matches: Sequence[CauseMatch],
    stats: TraceStats,
    remedies: Sequence[Remedy],
    planned: Planned | None = None,
) -> list[tuple[float | None, str | None]]:
    """Per match, ``(marginal speedup, what the run changed)``; ``(None, None)`` when neither a
    dedicated run nor a remedy for the cause exists. One batched engine pass serves every cause
    with a dedicated run, none when those runs rode along with an earlier batch (``planned``:
    :func:`marginal_scenarios` of the same matches, announced with :meth:`Probe.ahead`)."""
    probe = stats.probe
    out: list[tuple[float | None, str | None]] = [(None, None)] * len(matches)
    if planned is None:
        planned = marginal_scenarios(matches, stats)
    if probe is not None and launch_basis(matches):
        from diagnosers.whatif import WhatIfEngine

        if isinstance(probe.engine, WhatIfEngine):  # (the engine that simulates launch delays)
            return _with_launch_delays(matches, stats, probe, probe.engine, planned, remedies)
    batch: list[Arr] = [v for _, v, _ in planned]
    where: list[tuple[int, str]] = [(i, basis) for i, _, basis in planned]
    if batch and probe is not None:
        times = probe.means_of(batch)  # one pass; scenarios already run are not run again
        for (i, basis), t in zip(where, times, strict=True):
            gain = max(1.0, probe.t_orig / float(t)) if t > 0 else 1.0
            out[i] = (round(gain, 4), basis)
    by_cause = {r.cause_id: r for r in remedies}
    for i, m in enumerate(matches):
        if out[i][0] is None and m.id.value in by_cause:
            out[i] = (by_cause[m.id.value].predicted_speedup, "the remedy's what-if run")
    return out


def launch_basis(matches: Sequence[CauseMatch]) -> bool:
    """Whether the marginal runs keep a stall (``stall_delays``): a dataloader stall (a cause that
    lives in launch delays) is among ``matches`` beside another cause."""
    return len(matches) > 1 and any(m.id is CauseId.DATALOADER_STALL for m in matches)


def stall_delays(stats: TraceStats, matches: Sequence[CauseMatch]) -> Arr:
    """Per op, a launch delay holding only the reported input stalls: on each step's first forward
    of every worker a dataloader-stall match names, that worker-step's idle gap before it
    (``TraceStats.launch_idle``, what the detector measured); 0 on every other op."""
    from diagnosers.detectors.stats import FWD

    out = np.zeros(len(stats.optype), dtype=np.float64)
    ranks = {r for m in matches if m.id is CauseId.DATALOADER_STALL for r in m.location.ranks}
    cells = [(d, p) for d in range(stats.dp) for p in range(stats.pp) if int(stats.rank_of[d, p]) in ranks]
    if not cells or not stats.launch_idle.size:
        return out
    # each worker-step's first forward by start time (by row order when the statistics hold none)
    start = stats.op_start if stats.op_start is not None else np.arange(len(out), dtype=np.float64)
    fwd = np.flatnonzero(stats.optype == FWD)
    for d, p in cells:
        rows = fwd[(stats.op_dp[fwd] == d) & (stats.op_pp[fwd] == p)]
        if not rows.size:
            continue
        steps = stats.op_step_index[rows]
        # each step's first forward: rows sorted by (step, start), the first of each step
        order = rows[np.lexsort((start[rows], steps))]
        first = order[np.r_[True, np.diff(stats.op_step_index[order]) != 0]]
        si = stats.op_step_index[first]
        ok = (si >= 0) & (si < stats.launch_idle.shape[0])
        out[first[ok]] = stats.launch_idle[si[ok], d, p]
    return out


def _with_launch_delays(
    matches: Sequence[CauseMatch], stats: TraceStats, probe: Probe, engine: WhatIfEngine,
    planned: Planned, remedies: Sequence[Remedy],
) -> list[tuple[float | None, str | None]]:
    """``marginal_gains`` when a dataloader stall is reported beside other causes: each other
    cause's fixed durations (its dedicated scenario, or a slow communication's idealised transfers)
    simulated with the stall kept (``stall_delays``), against the original durations with the same
    stall, so it stays as it is; the stall's own gain is its remedy's (measured step time without
    the stall). One engine pass."""
    from diagnosers.remedies import comm_fix_mask

    out: list[tuple[float | None, str | None]] = [(None, None)] * len(matches)
    runs: list[tuple[int, Arr, str]] = [(i, v, basis) for i, v, basis in planned]
    for i, m in enumerate(matches):
        if m.id is CauseId.SLOW_COMMUNICATION and all(j != i for j, _, _ in runs):
            mask = comm_fix_mask(m, stats, probe)
            runs.append((i, np.where(mask, probe.ideal, probe.original), "the remedy's idealised transfers"))
    if runs:
        kept_delays = stall_delays(stats, matches)
        times = engine.simulate(
            np.stack([probe.original, *(v for _, v, _ in runs)]), launch_delay=kept_delays
        ).mean(axis=1)
        t_now = float(times[0])
        kept = " (the input stall's idle gaps kept in both runs)"
        for (i, _, basis), t in zip(runs, times[1:], strict=True):
            gain = max(1.0, t_now / float(t)) if t > 0 else 1.0
            out[i] = (round(gain, 4), basis + kept)
    by_cause = {r.cause_id: r for r in remedies}
    for i, m in enumerate(matches):
        if out[i][0] is None and m.id.value in by_cause:
            out[i] = (by_cause[m.id.value].predicted_speedup, "the remedy's what-if run")
    return out


# Two marginal gains closer than this (relative) are a tie: both come from simulations of one trace
# whose per-step noise is larger than that, so the order between them says nothing and the
# detectors' confidence (how well each signature fits) decides instead.
GAIN_TIE_TOLERANCE = 0.01


def rank_by_gain(matches: Sequence[CauseMatch]) -> list[CauseMatch]:
    """Causes ordered by marginal gain (largest first; causes without one last), then confidence.

    Causes whose gains are within ``GAIN_TIE_TOLERANCE`` of the largest gain of their run (walking
    down the gain order) form one tie, ordered by confidence."""
    by_gain = sorted(matches, key=lambda m: (-(m.marginal_gain or 0.0), -m.confidence))
    ranked: list[CauseMatch] = []
    tie: list[CauseMatch] = []
    for m in by_gain:
        top = tie[0].marginal_gain if tie else None
        g = m.marginal_gain
        if tie and (top is None or g is None or g * (1.0 + GAIN_TIE_TOLERANCE) < top):
            ranked.extend(sorted(tie, key=lambda t: -t.confidence))
            tie = []
        tie.append(m)
    ranked.extend(sorted(tie, key=lambda t: -t.confidence))
    return ranked


__all__ = ["marginal_gains", "rank_by_gain", "worker_at_peer_pace"]
