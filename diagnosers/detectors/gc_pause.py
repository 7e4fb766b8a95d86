"""Python GC pauses: sporadic long forwards on random (worker, step) pairs (METHOD.md A6).

A pause stops the process inside a forward; the matching backward is unaffected. So a paused
forward has a large "unmirrored excess" (its extra time not explained by its backward, see
``stats._forward_backward``). Evidence, all of which must hold:
- paused forwards: robust z-score of that excess >= 8 and excess >= 20% of a typical forward;
- above the job's own tail: the paused forwards are those above the widest gap (ratio of
  neighbours) in the descending excesses of the forwards that look paused, the largest excess of
  the others (at least the timer's 1 us) closing the list, and that gap must be at least
  ``TAIL_GAP`` (``above_tail``). On a noisy host ordinary forwards reach robust z 8-11 with a
  few milliseconds of excess (heavy-tailed op durations); a collector's pause stands orders of
  magnitude above them, so the two populations part at the widest gap. The forwards under it are
  the tail's, not pauses, and leave the count before any test below is run (a worker slow in
  every forward has no gap among its own forwards: all of them stay, and the sporadic test
  rejects it);
- forward-only: when some backwards also show an unmirrored excess of that size (heavy-tailed
  kernel noise hits both passes), the forward count must be improbable under a fair coin
  (binomial p <= 0.01); a pause inside the forward leaves the backwards clean. Only backwards
  slow by at least half the smallest pause count as such noise (``backwards_as_slow``);
- sporadic: no worker has pauses in more than half of its forwards (a worker slow in every
  forward is a machine), nor at the same forward (microbatch / position) in more than half of the
  steps (``recurring``: work the code does every step, e.g. one slow layer of an FSDP job whose
  other forwards are normal), and pauses hit more than one (worker, step) pair, or the one pair
  hit stands ``ONE_PAUSE_GAP`` (30) times above every other forward's excess (``lone_pause``): a
  profile that holds a single collection is judged by that pause's own evidence (forward-only,
  orders of magnitude above the job's tail), not by the collector's recurrence;
- not a job-wide stall: pauses of every worker (``STALL_WORKERS`` of them in large jobs) in one
  step are one stall of the whole job, not collectors; they are left out (and named in the
  diagnosis notes) before the rest is judged;
- what-if: removing the pauses removes at least ``MIN_SHARE`` of the slowdown, or putting only
  the pauses back into the ideal run recreates that share (the larger of the two counts); beside
  a larger cause, that share may instead be at least ``SECONDARY_EFFECT`` (5%) of the ideal step
  (``base.real_share``).
Growth over steps (pause time correlated with step index) marks the pattern ``growing`` and raises
confidence, but is not required: short profiles rarely show it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from diagnosers.detectors.base import (
    CauseMatch,
    TraceStats,
    categories_for,
    confidence,
    real_share,
    rounded,
)
from diagnosers.detectors.registry import register
from diagnosers.detectors.stats import BWD, OUTLIER_REL, OUTLIER_Z
from diagnosers.npplain import median, unique
from diagnosers.vocab import DECOMPOSE_THRESHOLD, CauseId, Pattern, Resource, Spatial, Temporal

if TYPE_CHECKING:
    from diagnosers.report_view import Report

Z_MIN = OUTLIER_Z
REL_MIN = OUTLIER_REL
# Heavy-tailed op noise slows forwards and backwards alike, a pause inside the forward does not:
# with backward outliers present, the forward outliers must be improbable under a fair coin.
NOISE_P = 0.01
# A job-wide stall: this share of the workers paused in the same step, all at one moment.
STALL_WORKERS = 0.75
# A pause recurs at one worker's same forward in at least this many steps to be code, not a
# collector (two meetings happen by chance: 1 in the number of microbatches).
RECUR_MIN_STEPS = 3
# ... and a recurrence counts only when chance makes it this improbable (``recurring``): the real
# slow layer of an FSDP job sits at one of 7 forwards in 6 of 6 steps (7^-5).
RECUR_CHANCE = 0.05
# A job of two workers: both paused in the same step, and in no other of at least this many
# steps, is one stall of the job (by chance two independent collectors meet so in 1 of n steps).
PAIR_STALL_STEPS = 4
# ... or, in a shorter window, when the two stopped for the same time (within this share of the
# longer pause): one thing outside both processes held them; independent collections run as long
# as each process's own heap takes (the generator draws them +-20%; set 4 job-stall-10: 0.02%).
PAIR_STALL_SAME_LENGTH = 0.05
# ... widened to what the job measures a pause to: PAIR_STALL_PRECISION_Z standard deviations of the
# difference of two excesses, each as noisy as the forwards that do not look paused (their excess
# over what their backward explains is the measure's own error: op noise on a 50 ms forward
# already moves two equal 0.1 s stalls 5% apart).
PAIR_STALL_PRECISION_Z = 3.0
# One freeze of several workers: paused forwards of different workers in one step whose spans
# overlap by at least this share of the longer one (the same moment and about as long).
FREEZE_OVERLAP = 0.9
# ... and whose starts are that close by chance at most this often: with k pauses in a step of
# length T, collectors on their own schedules start some pair within dt of each other about
# C(k, 2) * 2 dt / T times (set 6 mix2-slow-dp-group+gc-pause-17: ten pauses of ~0.9 s in a 4 s
# step, 22 of 32 met another's span by 90%, tens of milliseconds apart; the real freeze of two
# workers began 0.7 ms apart in a step of seconds: 1e-3).
FREEZE_CHANCE = 0.05
# A pause stands this many times above the largest excess of the forwards that do not look paused
# (the job's own op-duration tail): ordinary forwards passing the z test on a noisy host reach
# 1.1-1.5x that tail, real collections 100x and more (real recordings, docs/ACCURACY.md).
TAIL_GAP = 5.0
# A lone pause (one (worker, step) pair) counts when it stands this many times above the largest
# excess of every other forward. On the seen recordings a lone collection stands 68x and 498x
# above them; the largest forward of a healthy job that clears the tail gap alone, 5.2x and 11.6x.
ONE_PAUSE_GAP = 30.0
# excesses under the profiler's timer resolution (1 us) are zero: a ladder ratio against 0 says nothing
TIMER_S = 1e-6


def noise_p_value(n_fwd: int, n_bwd: int) -> float:
    """P(X >= n_fwd) for X ~ Binomial(n_fwd + n_bwd, 1/2): how likely this many of the outliers fall
    on forwards if outliers hit forwards and backwards alike (every forward has its backward)."""
    n = n_fwd + n_bwd
    if n == 0:
        return 1.0
    return float(sum(math.comb(n, k) for k in range(n_fwd, n + 1)) / 2.0**n)


def paused_forwards(stats: TraceStats) -> npt.NDArray[np.bool_]:
    """Boolean mask over ``stats.fwd_index``: forwards that look paused."""
    return (stats.fwd_excess_z >= Z_MIN) & (stats.fwd_excess >= REL_MIN * stats.fwd_typical)


def above_tail(stats: TraceStats, paused: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
    """``paused`` down to the forwards above the widest gap of the job's excess ladder.

    The excesses of the forwards in ``paused``, largest first, are closed by the job's tail (the
    largest excess of the forwards not in ``paused``, at least ``TIMER_S``); the cut falls after
    the entry with the largest ratio to the next one, and only when that ratio is at least
    ``TAIL_GAP`` (none: no forward is kept). So every kept forward's excess is at least
    ``TAIL_GAP`` times the tail, and the forwards that pass the z test by op noise, a few
    milliseconds below seconds-long collections, are set aside with it."""
    idx = np.flatnonzero(paused)
    if not idx.size:
        return paused
    rest = stats.fwd_excess[~paused]
    tail = max(float(rest.max()) if rest.size else 0.0, TIMER_S)
    order = idx[np.argsort(stats.fwd_excess[idx])[::-1]]
    ladder = np.append(np.maximum(stats.fwd_excess[order], TIMER_S), tail)
    ratio = ladder[:-1] / ladder[1:]
    cut = int(np.argmax(ratio))
    out = np.zeros_like(paused)
    if ratio[cut] >= TAIL_GAP:
        out[order[: cut + 1]] = True
    return out


def recurring(stats: TraceStats, paused: npt.NDArray[np.bool_]) -> bool:
    """Whether one worker's pauses fall on the same forward (its microbatch, or its position among
    the worker's forwards of the step) in more than half of the traced steps: a collector runs on
    its own schedule, a slow op or a sleep in the code recurs where the code is; and in at least
    ``RECUR_MIN_STEPS`` steps, with a chance of meeting that forward so often (``m^-(k-1)`` for a
    worker of ``m`` distinct forwards paused there in ``k`` steps) at most ``RECUR_CHANCE``. A
    worker with one forward per step recurs whenever it is paused so often. False without
    microbatch ids or with fewer than 3 steps."""
    if stats.op_mb is None or stats.n_steps < 3 or not paused.any():
        return False
    rows = stats.fwd_index[paused]
    width = int(stats.op_mb.max(initial=0)) + 2
    cell = stats.op_dp[rows].astype(np.int64) * stats.pp + stats.op_pp[rows]
    key = cell * width + stats.op_mb[rows].astype(np.int64) + 1
    pairs = unique(key * stats.n_steps + stats.op_step_index[rows])
    keys, steps_per_key = np.unique(pairs // stats.n_steps, return_counts=True)
    # At least RECUR_MIN_STEPS of them: a worker paused twice meets its own microbatch again by
    # chance once in (microbatches) tries, so in a 3-step window two steps are no pattern yet.
    many = steps_per_key > max(0.5 * stats.n_steps, RECUR_MIN_STEPS - 1)
    if not many.any():
        return False
    # ... and a meeting chance does not explain: a collector that stops a worker in k steps hits
    # one of its m forwards every time with chance m^-(k-1) (3 microbatches, 3 steps: 1 in 9)
    all_rows = stats.fwd_index
    all_key = (stats.op_dp[all_rows].astype(np.int64) * stats.pp + stats.op_pp[all_rows]) * width
    all_key = all_key + stats.op_mb[all_rows].astype(np.int64) + 1
    forwards = np.bincount(unique(all_key) // width)  # distinct forwards per worker
    for k, n in zip(keys[many].tolist(), steps_per_key[many].tolist(), strict=True):
        m = int(forwards[k // width]) if k // width < len(forwards) else 1
        if m <= 1 or float(m) ** -(n - 1) <= RECUR_CHANCE:
            return True
    return False


def lone_pause(stats: TraceStats, paused: npt.NDArray[np.bool_]) -> bool:
    """Whether the forwards in ``paused`` (one (worker, step) pair's) stand at least
    ``ONE_PAUSE_GAP`` times above the largest unmirrored excess of every other forward (at least
    ``TIMER_S``): one collection, seconds long where the job's other forwards vary by milliseconds."""
    if not paused.any():
        return False
    rest = stats.fwd_excess[~paused]
    tail = max(float(rest.max()) if rest.size else 0.0, TIMER_S)
    return float(stats.fwd_excess[paused].min()) >= ONE_PAUSE_GAP * tail


def paused_durations(stats: TraceStats, paused: npt.NDArray[np.bool_]) -> npt.NDArray[np.float64]:
    """Original durations with each paused forward shortened by its unmirrored excess."""
    base = stats.probe.original if stats.probe is not None else stats.transfer
    d = base.copy()
    rows = stats.fwd_index[paused]
    d[rows] = np.maximum(d[rows] - stats.fwd_excess[paused], 0.0)
    return d


def backwards_as_slow(stats: TraceStats, excess: float) -> int:
    """Backwards that run at least half of ``excess`` seconds over their (stage, chunk) median.

    The noise control must match the pauses in size: on a busy host a few backwards are 20% slow,
    which says nothing about forwards that stopped for a second and a half."""
    is_bwd = stats.optype == BWD
    if not is_bwd.any():
        return 0
    n_chunks = int(stats.op_gmc.max(initial=0)) + 2
    key = stats.op_pp[is_bwd].astype(np.int64) * n_chunks + stats.op_gmc[is_bwd] + 1
    dur = stats.transfer[is_bwd]
    med = np.zeros_like(dur)
    for k in unique(key):
        m = key == k
        med[m] = median(dur[m])
    return int(((dur - med) >= 0.5 * excess).sum())


def job_wide_stall_steps(
    stats: TraceStats, cell: npt.NDArray[np.int64], step_idx: npt.NDArray[np.int64],
    excess: npt.NDArray[np.float64] | None = None, unpaused: npt.NDArray[np.float64] | None = None,
) -> list[int]:
    """Step indices in which every worker (at least ``STALL_WORKERS`` of them in jobs of more than
    eight) has a paused forward: one stall hitting the whole job at once. A job of two workers
    qualifies only when that step holds every pause of a window of at least ``PAIR_STALL_STEPS``,
    or of a shorter window when the two pauses (``excess``, per paused forward) are as long as
    each other within ``PAIR_STALL_SAME_LENGTH``, or within ``PAIR_STALL_PRECISION_Z`` standard
    deviations of the difference of two excesses measured as ``unpaused`` (the excesses of the
    forwards that do not look paused) are (sets 8 and 9 job-stall-small-11, -6: one stall of
    0.11 s in both stages' first forwards, read 7.6% and 5.4% apart, named GC pauses).

    Collectors run on each process's own schedule, so in small jobs several may collect in the
    same step by chance; all of them at once is a job-wide event. (In a pipeline the stall reaches
    each stage's next forward at a different time, so the pauses need not overlap in time.)"""
    n_workers = stats.dp * stats.pp
    need = n_workers if n_workers <= 8 else int(np.ceil(STALL_WORKERS * n_workers))
    if need < 2:
        return []
    steps = unique(step_idx)
    same_length = False
    if excess is not None and len(excess) == 2:
        gap = float(excess.max() - excess.min())
        precision = (
            PAIR_STALL_PRECISION_Z * float(np.sqrt(2.0)) * float(np.std(unpaused))
            if unpaused is not None and len(unpaused) >= 2
            else 0.0
        )
        same_length = gap <= max(PAIR_STALL_SAME_LENGTH * float(excess.max()), precision)
    if need == 2 and (len(steps) > 1 or (stats.n_steps < PAIR_STALL_STEPS and not same_length)):
        # Two workers: both paused in one step is a stall only when no other step of a window of
        # several has a pause (collectors on their own schedules spread over the steps; two that
        # met once in a short window may be chance, unless they stopped for the same time).
        return []
    return [int(i) for i in steps if len(unique(cell[step_idx == i])) >= need]


def simultaneous_freezes(stats: TraceStats, rows: npt.NDArray[np.int64], cell: npt.NDArray[np.int64],
                         step_idx: npt.NDArray[np.int64],
                         pause: npt.NDArray[np.float64] | None = None) -> npt.NDArray[np.bool_]:
    """Per paused forward (op-table ``rows``, their workers ``cell`` and step indices): whether it
    is one freeze with a paused forward of another worker in the same step, the two spans
    overlapping by at least ``FREEZE_OVERLAP`` of the longer one, and starts that close improbable
    among the step's pauses (``C(k, 2) * 2 |dt| / T <= FREEZE_CHANCE``, ``k`` the paused forwards
    of the step passed in, ``T`` its measured step time).

    A collector runs on each process's own schedule and for as long as that process's heap takes;
    two processes stopped at the same moment for the same time are stopped by one thing outside
    them (the host, a shared filesystem), a job-wide stall of those workers, not two collections.
    Many collections in one step meet by chance (pauses as long as the step's compute, started
    tens of milliseconds apart): such a meeting is not the same moment. All False without op start
    times.

    With ``pause`` (each row's pause length, its forward's excess) the two may instead overlap as
    pauses, each taken from its op's start: under step noise the forwards' own compute moves their
    spans by more than a tenth while the freeze in them is the same (set 8 job-stall-small-1: two
    DP ranks stopped 0.1 ms apart for 0.106 s and 0.098 s, spans 0.177 s and 0.158 s, 89% overlap)."""
    out = np.zeros(len(rows), dtype=bool)
    if stats.op_start is None or len(rows) < 2:
        return out
    start = stats.op_start[rows]
    end = start + stats.transfer[rows]
    per_step = np.bincount(step_idx, minlength=stats.n_steps)
    for i in range(len(rows)):
        for j in range(i + 1, len(rows)):
            if cell[i] == cell[j] or step_idx[i] != step_idx[j]:
                continue
            if not (_overlaps(start[i], end[i], start[j], end[j]) or (
                pause is not None
                and _overlaps(start[i], start[i] + pause[i], start[j], start[j] + pause[j])
            )):
                continue
            k = int(per_step[step_idx[i]])
            step = float(stats.step_time[step_idx[i]]) if step_idx[i] < len(stats.step_time) else 0.0
            chance = k * (k - 1) / 2 * 2 * abs(float(start[i] - start[j])) / step if step > 0 else 0.0
            if chance <= FREEZE_CHANCE:
                out[i] = out[j] = True
    return out


def _overlaps(a0: float, a1: float, b0: float, b1: float) -> bool:
    """Whether spans [a0, a1] and [b0, b1] overlap by at least ``FREEZE_OVERLAP`` of the longer."""
    longer = max(a1 - a0, b1 - b0)
    return bool(longer > 0 and min(a1, b1) - max(a0, b0) >= FREEZE_OVERLAP * longer)


@register(CauseId.GC_PAUSE)
def detect(report: Report, stats: TraceStats) -> CauseMatch | None:
    """Match sporadic, forward-only pauses spread over workers and steps."""
    if report.slowdown < DECOMPOSE_THRESHOLD or len(stats.fwd_index) == 0:
        return None
    flagged = paused_forwards(stats)
    if not flagged.any():
        return None
    # the tail's forwards leave first: the sporadic tests below count pauses, not op noise
    paused = above_tail(stats, flagged)
    if not paused.any():
        return None
    rows = stats.fwd_index[paused]
    cell = stats.op_dp[rows].astype(np.int64) * stats.pp + stats.op_pp[rows]
    all_cell = stats.op_dp[stats.fwd_index].astype(np.int64) * stats.pp + stats.op_pp[stats.fwd_index]
    per_worker = np.bincount(cell, minlength=stats.dp * stats.pp)
    fwd_per_worker = np.maximum(np.bincount(all_cell, minlength=stats.dp * stats.pp), 1)
    worst_fraction = float((per_worker / fwd_per_worker).max())
    if worst_fraction > 0.5 or recurring(stats, paused):
        return None
    n_fwd = int(paused.sum())
    n_bwd = min(stats.bwd_outliers, backwards_as_slow(stats, float(stats.fwd_excess[paused].min())))
    p_noise = noise_p_value(n_fwd, n_bwd)
    if n_bwd > 0 and p_noise > NOISE_P:
        return None  # backwards have as many such outliers: heavy-tailed op noise, not a pause
    step_idx = stats.op_step_index[rows]
    unpaused = stats.fwd_excess[~flagged]  # the excess measure's own error
    stalled = job_wide_stall_steps(stats, cell, step_idx, stats.fwd_excess[paused], unpaused)
    if stalled:
        # Every worker stopped in the same step: a job-wide stall (a shared filesystem, a
        # checkpoint, the host), not collectors running on their own schedules. Judge the rest.
        ids = [int(stats.steps[i]) for i in stalled]
        note = (f"job-wide stall: every worker paused in step(s) {ids} "
                "(not a GC pause: collectors do not run in lockstep)")
        if note not in stats.notes:
            stats.notes.append(note)
        keep = ~np.isin(step_idx, stalled)
        paused = paused.copy()
        paused[np.flatnonzero(paused)[~keep]] = False
        rows, cell, step_idx = rows[keep], cell[keep], step_idx[keep]
        if not paused.any():
            return None
    frozen = simultaneous_freezes(stats, rows, cell, step_idx, np.maximum(stats.fwd_excess[paused], 0.0))
    if frozen.any():
        # Several workers stopped at one moment for as long: one freeze outside the processes
        # (a collector pauses one process on its own schedule). Judge the rest without it.
        ids = sorted({int(stats.steps[i]) for i in step_idx[frozen]})
        workers = sorted({int(c // stats.pp) for c in cell[frozen]})
        note = (f"host-wide freeze: the forwards of DP ranks {workers} stopped at the same moment and "
                f"for as long in step(s) {ids} (not a GC pause: a collector stops one process on its "
                "own schedule)")
        if note not in stats.notes:
            stats.notes.append(note)
        paused = paused.copy()
        paused[np.flatnonzero(paused)[frozen]] = False
        rows, cell, step_idx = rows[~frozen], cell[~frozen], step_idx[~frozen]
        if not paused.any():
            return None
    pairs = unique(cell * stats.n_steps + step_idx)
    if len(pairs) < 2 and not lone_pause(stats, paused):
        return None
    if stats.probe is not None:
        back = stats.probe.ideal.copy()
        back[stats.fwd_index[paused]] += stats.fwd_excess[paused]
        rem, add = stats.probe.shares(paused_durations(stats, paused), back)  # one batch of runs
        share = max(rem, add)
    else:
        share = float(stats.fwd_excess[paused].sum() / max(stats.step_time.sum(), 1e-12)) / max(
            report.slowdown - 1.0, 1e-9
        )
    if not real_share(share, stats.probe):
        return None

    pause_by_step = np.bincount(step_idx, weights=stats.fwd_excess[paused], minlength=stats.n_steps)
    growth = 0.0
    if stats.n_steps >= 4 and pause_by_step.std() > 0:
        # Rank correlation of pause time with the step id: robust to one huge pause.
        r1 = np.argsort(np.argsort(stats.steps)).astype(float)
        r2 = np.argsort(np.argsort(pause_by_step)).astype(float)
        growth = float(np.corrcoef(r1, r2)[0, 1])
    growing = growth >= 0.5 and int((pause_by_step > 0).sum()) >= 4
    n_pauses = int(paused.sum())
    mean_pause = float(stats.fwd_excess[paused].mean())
    cells_hit = sorted({(int(c // stats.pp), int(c % stats.pp)) for c in unique(cell)})
    steps_hit = sorted({int(stats.steps[i]) for i in unique(step_idx)})
    n_workers = stats.dp * stats.pp
    fit = 0.75 + (0.15 if growing else 0.0) + 0.1 * min(1.0, len(cells_hit) / max(2, n_workers // 4))
    summary = (
        f"{n_pauses} forward passes on {len(cells_hit)} of {n_workers} workers over {len(steps_hit)} of "
        f"{stats.n_steps} steps ran about {mean_pause * 1e3:.0f} ms longer than usual while their "
        f"backward passes stayed normal: the process stopped inside the forward, as Python's garbage "
        f"collector does. The pauses hit different workers in different steps, so the others wait at "
        f"the next collective. Removing the pauses removes {share * 100:.0f}% of the slowdown"
        + ("; pause time grows over the run." if growing else ".")
    )
    return CauseMatch(
        id=CauseId.GC_PAUSE,
        confidence=confidence(share, fit),
        location=stats.location(cells_hit, steps_hit),
        pattern=Pattern(
            spatial=Spatial.RANDOM_DP,
            temporal=Temporal.GROWING if growing else Temporal.SPORADIC,
            resource=Resource.COMPUTE,
        ),
        evidence={
            "paused_forwards": n_pauses,
            "mean_pause_s": rounded(mean_pause),
            "max_pause_s": rounded(float(stats.fwd_excess[paused].max())),
            "workers_hit": len(cells_hit),
            "steps_hit": len(steps_hit),
            "worst_worker_pause_fraction": rounded(worst_fraction),
            "growth_rank_correlation": rounded(growth),
            "fix_share": rounded(share),
            "backward_outliers": n_bwd,
            "noise_p_value": rounded(p_noise, 6),
            "pauses_per_worker_step": rounded(n_pauses / max(n_workers * stats.n_steps, 1)),
        },
        summary=summary,
        categories=categories_for(CauseId.GC_PAUSE),
    )
