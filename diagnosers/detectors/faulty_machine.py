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
  sporadic pause produces — unless the job's microbatches carry their own cost (variable lengths,
  ``lengths_vary``), where that is what longer data does;
- what-if: idealising only the hot workers' compute removes at least ``MIN_SHARE`` of the
  slowdown, or putting only their compute back into the ideal run recreates that share (the
  host-level counterpart of M_W; M_W itself fixes the top 3% of workers, fewer than a host has
  in small jobs, and is reported as evidence).

On a busy host (real recordings, +-50% step-to-step noise between identical ranks) three of these
read compute and the optimizer step together, two measurements of the same machine, wherever the
job's own noise says they are independent (``job_floor``: correlation of their step noise at
most ``JOINT_MAX_RHO``): the onset test (``_joint_onset``), the own-compute test (``own_slow``) and
the outlier test (``joint_outlier_z`` against ``small_job_outlier_bar``); the onset test also
reads compute with the worker's per-step fastest ops (``_fast_op_onset``: a throttled machine
lengthens every op from its onset on, a busy host's descheduling only some). When S_w is hot nearly
everywhere (every worker's own noise costs the job as much), the suspects are the workers whose
own compute is slowest against their stage peers (``own_suspects``).

Where whole steps move together instead (one factor per worker-step scales every op alike:
``fast_ops_are_step_sums``), the step sums are the only evidence: the fast ops are no second look,
the outlier spread is the step floor without its few-steps bias (``unbiased_typical_sigma``), a
two-worker job reads its noise from the pair's successive steps, and a candidate that ran at its
normal speed in some step is no machine (``_normal_step``). That is read from the other workers;
a candidate whose own fast ops hold still while its step sums move (``steadier_at_best``) keeps
them as its second look.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from diagnosers.detectors.base import (
    MIN_SHARE,
    CauseMatch,
    TraceStats,
    categories_for,
    confidence,
    host_cluster,
    real_share,
    rounded,
)
from diagnosers.detectors.fast_step import starved_not_slow
from diagnosers.detectors.peers import (
    JOINT_CLIP,
    ChangePoint,
    NoiseFloor,
    change_point,
    joint_scale,
    joint_series,
    level_shift,
    log_ratios,
    median_mad_deflation,
    median_of_others,
    noise_correlation,
    noise_floor,
    partition_explains,
    peer_ratio,
    peer_reference,
    successive_step_spread,
)
from diagnosers.detectors.registry import register, register_beside, register_fallback
from diagnosers.detectors.sequence_length import COHERENCE, COHERENCE_Z, microbatch_coherence
from diagnosers.detectors.stats import BWD, FWD, OUTLIER_REL
from diagnosers.detectors.worker_cost import optimizer_ratio, worker_shares
from diagnosers.heatmap import worker_matrix
from diagnosers.npplain import median, unique
from diagnosers.vocab import DECOMPOSE_THRESHOLD, CauseId, Pattern, Resource, Spatial, Temporal

if TYPE_CHECKING:
    from diagnosers.report_view import Report

PERSIST_FRACTION = 0.75
# The weaker "outlier worker" finding (no signature matched): S_w and speed this many robust sigma out.
FALLBACK_Z = 2.5
# A machine slow in only some kernels (e.g. forwards) must be slow in nearly all of them.
CONSISTENT_FRACTION = 0.9
SLOW_OP = 1.2
# A faulty machine stands outside the fleet's spread of worker speeds: its persistent speed factor
# is at least this many robust standard deviations (MAD) from the others'. Gaussian spread reaches
# 5 sigma once in ~3.5 million workers, so a slowest-of-many healthy GPU does not pass.
OUTLIER_Z = 5.0
# An onset: a clean upward change point in a worker's per-step ratio to its peers, the jump at
# least this many noise units (standard errors of the two means), with at least two slow steps.
ONSET_Z = 4.0
ONSET_MIN_AFTER = 2
# ... and at least two normal steps before it: one normal step then two slow ones is what a burst
# of CPU contention on a shared host looks like too.
ONSET_MIN_BEFORE = 2
# A hot cell is slow in its own compute when its typical ratio to its peers stands this many
# standard errors above the noise floor, and at least MIN_EXCESS (2%) above them.
OWN_Z = 3.0
MIN_EXCESS = 0.02
# The joint onset test (compute and optimizer ratios combined, ``peers.level_shift``), for jobs
# whose compute alone is too noisy for ONSET_Z: a jump of at least ONSET_JOINT_Z standard errors,
# the steps before at the healthy level (within 2 standard errors of the peers), the steps after
# at least ONSET_Z standard errors above it.
ONSET_JOINT_Z = 2.5
ONSET_BEFORE_Z = 2.0
# A forward position long without its backward in nearly every step (``slow_positions``): at
# least this robust z of its unmirrored excess (the GC detector's pause measure, at a lower bar:
# recurring in every step is the evidence, not one extreme op).
POSITION_Z = 5.0
# The joint outlier test needs at least this many (affected) steps.
JOINT_MIN_STEPS = 3
# The optimizer counts as a second measurement only while its step-to-step noise correlates with
# compute's at no more than this (a generator's per-worker-step factor moves both alike: ~0.98).
JOINT_MAX_RHO = 0.5
# The fast-op speed factor (``fast_op_factors``): this percentile of a worker's forward (and
# backward) durations. A busy host lengthens ops sporadically (a descheduled process); a slow
# machine lengthens every op, its fastest ones included.
FAST_OP_QUANTILE = 0.1
# The per-step fast ops are a second look at a worker's onset (``_fast_op_onset``) only while their
# step noise correlates with compute's at no more than this: where one per-worker-step factor
# scales every op alike (the generator's step noise: 0.995-0.997) the fastest ops are the step
# sums again, and the joint bars, set for two looks, would test compute alone at a lower bar.
# On the example job's recordings (sporadic descheduling) the correlation is 0-0.91, median 0.56.
FAST_OP_MAX_RHO = 0.9
# ... unless the candidate's own per-step fast-op ratio moves at most this share of its compute
# ratio's step-to-step spread (``steadier_at_best``): whole-step noise moves both alike (a ratio of
# about 1 or more), so its fast ops are a reading of their own.
FAST_STEADY = 0.5
# ... and the spread of the others' fast-op factors is never taken below this (log units, about
# 5%): with a handful of workers their MAD can be near zero by chance.
FAST_OP_MIN_SIGMA = 0.05
# The outlier-worker finding read from the fastest ops (``_fast_op_outlier``), for a worker the step
# sums do not single out: S_w's hottest at least this many robust sigma above the other workers
# (it stands out at all), its fast-op factor at least ``OUTLIER_Z`` robust sigma out of theirs, and
# its per-step fast ops at least ``FAST_OUTLIER_STEP`` (1.5x) its stage peers' in every step (a slow
# machine lengthens its fastest ops in every step; a busy host's descheduling in some).
FAST_OUTLIER_SW_Z = 2.0
FAST_OUTLIER_STEP = 1.5
# A worker inside a stage imbalance's row is the row's only when its stage peers share its load:
# the outlier finding runs beside the imbalance when the worker's S_w excess is at least
# ROW_OUTLIER_RATIO times its stage peers' median excess and its fastest ops run at least
# FAST_OUTLIER_STEP times its peers' (``fast_op_factors``: a heavier stage's ops are heavier on
# every DP rank alike, a slow machine's on one).
ROW_OUTLIER_RATIO = 2.0
# Under DECOMPOSE_THRESHOLD the outlier-worker finding judges S_w's hottest worker only when it
# stands SUB_THRESHOLD_SW_Z robust sigma above the others and its own S_w excess is at least
# SUB_THRESHOLD_EXCESS (5%, the "clear" slowdown).
SUB_THRESHOLD_SW_Z = 8.0
SUB_THRESHOLD_EXCESS = 0.05
# The outlier-worker finding read from the worker's fastest op of the window (``_floor_outlier``):
# its fastest forward and its fastest backward each at least FAST_OUTLIER_STEP times its stage
# peers' fastest, and its log excess at least FLOOR_GAP times the next worker's (it stands alone).
FLOOR_GAP = 2.0
# ``hottest_share``: a faulty machine runs further over its peers than every worker off its stage
# in at least HOTTEST_CHANCE times the share of steps an exchangeable worker would by chance (one
# in n + 1, with n workers off its stage), and never need do so in more than HOTTEST_SHARE of them
# (``hottest_bar``). Seen recordings (bar 0.29 at 2x4, 0.33 at 2x3 and 3x2, 0.40 at 4x2, 0.50 at
# 2x2): the true persistent and onset machines 0.50 or more (0.50: tune slow-rank-2x4-s100, heldout5
# slow-rank-2x3, three onsets, heldout onset-4x2 the nearest its bar); the healthy 2x4's false
# machine 0.00 (bar 0.29), heldout5 send-delay-4x2's untouched rank 1 0.25 (bar 0.40).
HOTTEST_CHANCE = 2.0
HOTTEST_SHARE = 0.5
# A faulty machine runs at least FAULT_MIN_EXCESS (8%) slower than its stage peers: a healthy
# fleet's GPUs differ by a few percent, and a job of a few workers cannot measure that spread
# (``NoiseFloor.fleet_sigma`` needs more), so a persistent 2-7% on a quiet floor stands many sigma
# out while being a fleet's ordinary spread. The generator's healthy GPUs reach about 7.5% (a mild
# GPU 1.5-3.5% and up to two of its own 2% worker spread: set 10 healthy-mild-gpu-11 measured 6.5%,
# named faulty-machine 0.825 under a 5% bar); the seen true machines this detector names run 9.3%
# or more, the example job's injected ranks 13% or more.
FAULT_MIN_EXCESS = 0.08
# An onset is the job's own excursion by chance (``onset_by_chance``) when another worker rises over
# as many consecutive steps by at least ONSET_LOOKALIKE times the candidate's jump, or,
# with one stage peer, when against the other stages' workers the candidate's jump is under
# ONSET_WIDE of its jump against that peer (the peer moved, not the candidate).
ONSET_LOOKALIKE = 0.75
ONSET_WIDE = 0.5
# A persistently slow worker is the job's own bursts by chance (``every_step_by_chance``) when the
# expected count of workers that bursts put at half its typical excess or more in every step, N q^n,
# reaches EVERY_STEP_CHANCE. Seen synthetic sets 6-12 with tune6 and tune8: the true machines hot
# in every step at most 0.05 (clear ones) and 0.19 (one not clear, set 11 faulty-weak-bursts-8);
# the false ones 0.38 (set 8 healthy-step-bursts-9) and 1.1 (tune8 faulty-weak-bursts-10, a burst
# worker named in the machine's place).
EVERY_STEP_CHANCE = 0.1


def hot_cells(report: Report) -> list[tuple[int, int]]:
    """Cells with at least half the hottest cell's excess slowdown, hottest first."""
    m = worker_matrix(report, "exact")  # (pp, dp)
    excess = m - 1.0
    top = float(excess.max())
    if top <= 0:
        return []
    pp_idx, dp_idx = np.nonzero(excess >= 0.5 * top)
    cells = [(int(d), int(p)) for p, d in zip(pp_idx, dp_idx, strict=True)]
    return sorted(cells, key=lambda c: -excess[c[1], c[0]])


def compute_ratios(stats: TraceStats, cells: list[tuple[int, int]]) -> np.ndarray:
    """(S, len(cells)): each cell's per-step compute over its peers' (``peer_reference``, all the
    cells left out)."""
    ref = peer_reference(stats.compute, cells)
    cols = [stats.compute[:, d, p] / np.maximum(ref[:, p], 1e-12) for d, p in cells]
    return np.stack(cols, axis=1) if cols else np.zeros((stats.n_steps, 0))


def slow_cells(stats: TraceStats, cells: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The candidate cells whose own compute is slow: typical ratio to peers (all candidates left
    out) at least half the slowest cell's excess. Used for host clusters, whose cells may fill a
    stage; single workers use :func:`own_slow` (leave-one-out)."""
    if not cells:
        return []
    med = median(compute_ratios(stats, cells), axis=0) - 1.0
    top = float(med.max())
    if top <= 0:
        return []
    return [c for c, m in zip(cells, med, strict=True) if m >= 0.5 * top]


@dataclass
class CellTiming:
    """One candidate's per-step log compute ratio to its peers and what it says over time."""

    cell: tuple[int, int]
    r: np.ndarray  # (S,) log(compute / peers' median), the cell left out of its reference
    typical: float  # the slow level: median of r, or the level after an onset
    persist: float  # fraction of steps that are slow (against the noise floor)
    onset: ChangePoint | None  # set when the cell was normal first and slow from ``onset.index``

    @property
    def affected(self) -> np.ndarray:
        """(S,) the steps the cell is slow in (all of them unless an onset)."""
        m = np.ones(len(self.r), dtype=bool)
        if self.onset is not None:
            m[: self.onset.index] = False
        return m


def cell_timing(stats: TraceStats, cell: tuple[int, int], floor: NoiseFloor,
                leave_out: list[tuple[int, int]] | None = None) -> CellTiming:
    """The cell's timing against the noise floor, judged on its own (not jointly with the others).

    A step is slow when its log ratio reaches ``step_threshold``: half the cell's typical excess
    where the noise is small, down to a quarter of it (never below the floor) where the job is
    noisy. An onset is a clean upward change point (``peers.change_point``) in the compute ratio
    whose jump stands at least ``ONSET_Z`` noise units out, or, where compute alone is too noisy,
    one in the compute and optimizer ratios combined (``_joint_onset``); either way with the steps
    before it at the healthy level (``_onset_holds``)."""
    r = np.log(np.maximum(peer_ratio(stats.compute, cell, leave_out or []), 1e-12))
    typical = float(median(r))
    onset = None
    if stats.n_steps >= ONSET_MIN_AFTER + ONSET_MIN_BEFORE:
        cp = change_point(r, floor.step, min_after=ONSET_MIN_AFTER, min_before=ONSET_MIN_BEFORE)
        if cp is not None and cp.z >= ONSET_Z and cp.after > 0 and _onset_holds(r, cp, typical, floor):
            onset = cp
        else:
            onset = _joint_onset(stats, cell, floor, leave_out or [], r, typical)
        if onset is None:
            onset = _fast_op_onset(stats, cell, floor, leave_out or [], r, typical)
        if onset is not None:
            typical = onset.after
    thr = step_threshold(typical, floor)
    affected = r if onset is None else r[onset.index:]
    persist = float(np.mean(affected >= thr)) if typical > 0 else 0.0
    return CellTiming(cell, r, typical, persist, onset)


def _onset_holds(r: np.ndarray, cp: ChangePoint, typical: float, floor: NoiseFloor) -> bool:
    """Whether a change point of the compute ratio ``r`` reads as normal-then-slow in compute
    terms: the level before low (within twice the floor, or a quarter of the level after), the
    jump at least half the slow level, and the steps before under the slow-step threshold."""
    jump = cp.after - cp.before
    low_before = cp.before <= max(2.0 * floor.step, 0.25 * cp.after)
    clean = low_before and jump >= 0.5 * max(typical, cp.after)
    return clean and float(np.mean(r[: cp.index])) < step_threshold(cp.after, floor)


def _joint_onset(stats: TraceStats, cell: tuple[int, int], floor: NoiseFloor,
                 leave_out: list[tuple[int, int]], r: np.ndarray, typical: float) -> ChangePoint | None:
    """An onset read from compute and optimizer together (``peers.joint_series``,
    ``peers.level_shift``), returned in compute units (before/after = the compute ratio's means).

    On a busy host a worker's compute moves by +-50% from step to step, so a 1.5x throttle
    that starts mid-window rarely leaves a clean jump in compute alone; its optimizer step, a
    second and independent measurement of the same machine, moves with it. None without
    optimizer ops or when the combined series shows no healthy-then-slow shift."""
    if floor.optimizer is None or not (stats.optimizer > 0).all():
        return None
    ro = np.log(np.maximum(peer_ratio(stats.optimizer, cell, leave_out), 1e-12))
    return _shift_in_compute_terms(r, ro, floor.optimizer, floor.joint_rho, floor, typical)


def _fast_op_onset(stats: TraceStats, cell: tuple[int, int], floor: NoiseFloor,
                   leave_out: list[tuple[int, int]], r: np.ndarray, typical: float) -> ChangePoint | None:
    """An onset read from compute and the per-step fast ops together (``fast_op_steps``): the
    joint test of ``_joint_onset`` with the worker's per-step fast-op ratio to its peers as the
    second measurement, its noise the job's own step spread of that ratio (``peers.noise_floor``,
    the candidates left out) and its correlation with compute's noise taken from the job
    (``peers.noise_correlation``, in the combined series' scale: ``peers.joint_scale``; none
    above ``FAST_OP_MAX_RHO``, 0.9).

    Why: a busy host's descheduling lengthens some of a worker's ops in a step and not others, so
    the step sums move by +-50% and a throttled worker's peers may catch up in one step; a
    throttled machine lengthens every op from its onset on, its fastest ones too, which the
    descheduling noise barely reaches. None without forward or backward ops in every step."""
    fast = stats.shared("fast_op_steps", lambda: fast_op_steps(stats))  # once per trace statistics
    if not (fast > 0).all():
        return None
    exclude = [cell, *leave_out]
    # The fast ops are some of the same ops as the step sums: their noise is partly compute's,
    # which the combined series' scale takes in (a correlated second look counts for less), and
    # mostly compute's noise is no second look at all.
    rho = noise_correlation(stats.compute, fast, exclude)
    if rho > FAST_OP_MAX_RHO:
        return None
    sigma = noise_floor(fast, exclude=exclude).step
    rf = np.log(np.maximum(peer_ratio(fast, cell, leave_out), 1e-12))
    return _shift_in_compute_terms(r, rf, sigma, rho, floor, typical)


def _shift_in_compute_terms(r: np.ndarray, second: np.ndarray, sigma: float, rho: float,
                            floor: NoiseFloor, typical: float) -> ChangePoint | None:
    """The level shift (``peers.level_shift`` at ``ONSET_JOINT_Z``, ``ONSET_BEFORE_Z`` and
    ``ONSET_Z``) of compute's log ratios ``r`` combined with a second measurement
    ``second`` of noise ``sigma`` correlating at ``rho``, returned in compute units, or None when
    compute itself does not read normal-then-slow (below)."""
    u = joint_series([r, second], [floor.step, sigma], rho)
    jp = level_shift(u, ONSET_MIN_BEFORE, ONSET_MIN_AFTER, ONSET_JOINT_Z, ONSET_BEFORE_Z, ONSET_Z)
    if jp is None:
        return None
    k = jp.index
    cp = ChangePoint(k, float(np.mean(r[:k])), float(np.mean(r[k:])), jp.z)
    # In compute terms too: the steps before within ONSET_BEFORE_Z standard errors of the peers
    # (the noise-aware form of _onset_holds's level test) and the jump most of the slow level.
    healthy_before = cp.before <= ONSET_BEFORE_Z * floor.step / np.sqrt(k)
    if cp.after <= 0 or not healthy_before or cp.after - cp.before < 0.5 * max(typical, cp.after):
        return None
    return cp


def step_threshold(typical: float, floor: NoiseFloor) -> float:
    """Log ratio a step must reach to count as slow for a cell of this typical excess."""
    return min(0.5 * typical, max(floor.step, 0.25 * typical))


def own_slow(stats: TraceStats, cells: list[tuple[int, int]], floor: NoiseFloor) -> list[CellTiming]:
    """The candidates that are hot because their *own* compute is slow, not because they wait.

    Each cell is compared with its stage peers with only itself left out: in small DP the peer of a
    slow worker is hot too (it waits in the collectives) but its own compute is normal or fast, so
    it drops out here. Kept: typical excess at least half the slowest cell's and above the noise
    (``OWN_Z`` standard errors of a typical ratio) — in compute alone, or in compute and optimizer
    together (``joint_typical_z``: on a busy host a few steps of compute cannot show a 1.3x worker
    at 3 standard errors, its optimizer step, slow too on a slow machine, adds the evidence), or in
    its fastest ops (``fast_op_outlier_z`` at least ``OWN_Z``: a waiting peer's fastest ops are
    normal, a slow machine's are slow too, and the host's descheduling noise that makes step sums
    move by +-50% barely reaches them)."""
    timings = [cell_timing(stats, c, floor) for c in cells]
    top = max((t.typical for t in timings), default=0.0)
    if top <= 0:
        return []
    least = max(0.5 * top, np.log(1.0 + MIN_EXCESS))
    bar = max(least, OWN_Z * floor.typical_sigma())
    return [
        t
        for t in timings
        if t.typical >= bar
        or (
            t.typical >= least
            and (
                joint_typical_z(stats, t, floor) >= OWN_Z
                or fast_op_outlier_z(stats, [t.cell], t.affected) >= OWN_Z
            )
        )
    ]


def joint_typical_z(stats: TraceStats, t: CellTiming, floor: NoiseFloor) -> float:
    """How many standard errors the cell's typical compute and optimizer ratios to its peers stand
    above them, combined (each typical over its step spread / sqrt(steps), clipped at
    ``peers.JOINT_CLIP``, Stouffer's sum); over the affected steps of an onset. -inf without
    optimizer ops in every worker-step."""
    if floor.optimizer is None or not (stats.optimizer > 0).all():
        return float("-inf")
    aff = t.affected
    n = max(int(aff.sum()), 1)
    ro = np.log(np.maximum(peer_ratio(stats.optimizer, t.cell), 1e-12))[aff]
    se_c = max(floor.step, 1e-12) * 1.25 / np.sqrt(n)
    se_o = max(floor.optimizer, 1e-12) * 1.25 / np.sqrt(n)
    z = np.clip([t.typical / se_c, float(median(ro)) / se_o], -JOINT_CLIP, JOINT_CLIP)
    return float(z.sum() / joint_scale(2, floor.joint_rho))


def outlier_z(stats: TraceStats, cells: list[tuple[int, int]], affected: np.ndarray | None = None,
              floor: NoiseFloor | None = None) -> float:
    """The smallest robust z-score, over the cells, of the worker's persistent speed factor among
    the workers outside ``cells`` (inf when nothing is left to compare with).

    A worker's factor is the median over the ``affected`` steps (all by default) of its compute
    over the median of its stage's workers outside ``cells``. Every fleet has a spread of GPU
    speeds; a faulty machine is one that stands outside that spread, not merely the slowest of
    many (with 200 workers the slowest healthy one sits ~3 sigma out). The spread is the larger of
    the others' MAD and what step noise alone gives a factor (``floor.typical_sigma``)."""
    comp = stats.compute if affected is None else stats.compute[affected]
    # Stage reference without the candidates (with 2 DP ranks a slow worker is half its stage).
    ref = peer_reference(comp, cells)[:, None, :]
    factor = median(np.divide(comp, ref, out=np.ones_like(comp), where=ref > 0), axis=0)  # (dp, pp)
    others = _outside(factor, cells, stats)
    if others.size < 2:
        return float("inf")
    med = float(median(others))
    # Floor the spread at 0.1%: below that, clocks and timers, not GPUs, set the differences.
    sigma = max(1.4826 * float(median(np.abs(others - med))), 1e-3)
    if floor is not None and affected is not None:
        n_aff = int(affected.sum())
        sigma = max(sigma, floor.step * 1.25 / np.sqrt(max(n_aff, 1)))
        if fast_ops_are_step_sums(stats, cells):
            # Whole steps move together (no second look exists): the factor is a median of a few
            # noisy steps and nothing else, so the step spread is read without the few-steps bias
            # of the MAD around each worker's own median (``peers.median_mad_deflation``: 0.72 of
            # sigma at 4 steps). tune5 healthy-step-noise-8: 4 steps of +-23%, a healthy worker's
            # typical 0.45 stood 6.2 "sigma" out of a deflated spread, 4.5 of the unbiased one.
            sigma = max(sigma, unbiased_typical_sigma(floor, n_aff))
    return float(min((factor[d, p] - med) / sigma for d, p in cells))


def _outside(factor: np.ndarray, cells: list[tuple[int, int]], stats: TraceStats) -> np.ndarray:
    """The (dp, pp) ``factor`` of every traced worker outside ``cells``: the candidates' peers."""
    inside = np.zeros((stats.dp, stats.pp), dtype=bool)
    for d, p in cells:
        inside[d, p] = True
    return factor[~inside & (stats.rank_of >= 0)]


def optimizer_outlier_z(stats: TraceStats, cells: list[tuple[int, int]], affected: np.ndarray,
                        floor: NoiseFloor) -> float:
    """``outlier_z`` for the optimizer step, in log units (one descheduled optimizer step can be
    ten times its peers'): the smallest, over the cells, of the log speed factor's distance from
    the other workers' median, over the larger of their MAD and ``floor.optimizer`` / sqrt(steps).
    -inf without optimizer ops in every worker-step."""
    if floor.optimizer is None or not (stats.optimizer > 0).all():
        return float("-inf")
    opt = stats.optimizer[affected]
    ref = peer_reference(opt, cells)[:, None, :]
    factor = median(np.log(np.maximum(opt, 1e-12) / np.maximum(ref, 1e-12)), axis=0)  # (dp, pp)
    others = _outside(factor, cells, stats)
    if others.size < 2:
        return float("-inf")
    med = float(median(others))
    step_se = floor.optimizer * 1.25 / np.sqrt(max(int(affected.sum()), 1))
    sigma = max(1.4826 * float(median(np.abs(others - med))), step_se)
    return float(min((factor[d, p] - med) / max(sigma, 1e-12) for d, p in cells))


def worker_order_statistic(
    worker: np.ndarray, dur: np.ndarray, n_workers: int, fraction: float
) -> np.ndarray:
    """(n_workers,) each worker's duration at position ``floor(fraction * (n - 1))`` of its own
    durations in ascending order (``n`` its op count); NaN for a worker without ops.

    An order statistic does not depend on how equal values are ordered, so a partition finds it:
    when every worker present has the same op count (a job traced alike on every worker), the
    durations grouped by worker (a stable sort of the worker ids, a radix sort of 16-bit ids) are
    one (workers, n) matrix partitioned along its rows; otherwise one sort by (worker, duration).
    (A lexsort of 0.8M rows per type cost 0.13 s at 1.9M ops; the partition a fifth of it.)"""
    n = np.bincount(worker, minlength=n_workers)
    pick = np.floor(fraction * np.maximum(n - 1, 0)).astype(np.int64)
    present = n > 0
    counts = n[present]
    out = np.full(n_workers, np.nan)
    if counts.size and (counts == counts[0]).all():
        if len(worker) < 2 or bool((worker[1:] >= worker[:-1]).all()):
            # rows already grouped in ascending worker order (a (step, worker) cell's ops stored
            # together, cells in order): the stable sort is the identity, no sort and no gather
            grouped = dur.reshape(-1, int(counts[0]))
        else:
            ids = worker.astype(np.int16) if n_workers <= np.iinfo(np.int16).max else worker
            grouped = dur[np.argsort(ids, kind="stable")].reshape(-1, int(counts[0]))
        at = int(pick[present][0])
        out[present] = np.partition(grouped, at, axis=1)[:, at]
        return out
    if counts.size:
        order = np.lexsort((dur, worker))
        start = np.cumsum(n) - n
        out[present] = dur[order][(start + pick)[present]]
    return out


def fast_op_factors(stats: TraceStats, affected: np.ndarray, cells: list[tuple[int, int]]) -> np.ndarray:
    """(dp, pp) each worker's fast-op speed factor: the mean over forward and backward of the log of
    its ``FAST_OP_QUANTILE`` op duration (lower quantile, in the ``affected`` steps) over the median
    of the same over its stage's workers outside ``cells`` (``peer_reference``). NaN for a worker
    without such ops; 0 for all of them when the job records neither type.

    Why: on a busy host a worker's step compute moves by +-50% because its process is descheduled
    in some ops and not others; that noise is one-sided and sporadic, so the fastest of a worker's
    ops are nearly free of it. A slow machine (a throttled GPU, a slow core) lengthens every op, the
    fastest ones too. The lower quantile thus measures the machine's speed where the step sums
    measure mostly the host's contention (on the example job's recordings the injected slow rank
    has the job's highest factor in every persistent case, 1.13-4.5x)."""
    out = np.zeros((stats.dp, stats.pp))
    used = 0
    # the same order statistics read from the engine's dense layout when it holds the rows
    dense = stats.order_statistics((FWD, BWD), FAST_OP_QUANTILE, affected)
    in_steps = affected[stats.op_step_index] if dense is None else None
    for k, code in enumerate((FWD, BWD)):
        if dense is not None:
            q = dense[k]
            if np.isnan(q).all():
                continue  # no such op in the steps
        else:
            rows = np.flatnonzero((stats.optype == code) & in_steps)
            if not rows.size:
                continue
            worker = stats.op_dp[rows].astype(np.int64) * stats.pp + stats.op_pp[rows]
            q = worker_order_statistic(worker, stats.transfer[rows], stats.dp * stats.pp, FAST_OP_QUANTILE)
        q = q.reshape(stats.dp, stats.pp)
        ref = peer_reference(np.nan_to_num(q, nan=0.0)[None], cells)[0]
        out += np.log(np.maximum(q, 1e-12) / np.maximum(ref, 1e-12)[None, :])
        used += 1
    return out / max(used, 1)


def fast_op_steps(stats: TraceStats) -> np.ndarray:
    """(S, dp, pp) each worker's fast-op duration per step: the geometric mean over forward and
    backward of its ``FAST_OP_QUANTILE`` op duration in that step (lower quantile, as in
    ``fast_op_factors``); 0 where a worker-step has no such op; ones when the job records
    neither type."""
    n_cells = stats.dp * stats.pp
    logs = np.zeros(stats.n_steps * n_cells)
    used = 0
    seen = np.ones(stats.n_steps * n_cells, dtype=bool)
    # the same order statistics read from the engine's dense layout when it holds the rows
    dense = stats.order_statistics((FWD, BWD), FAST_OP_QUANTILE, per_step=True)
    for k, code in enumerate((FWD, BWD)):
        if dense is not None:
            q = dense[k].reshape(-1)
            if np.isnan(q).all():
                continue  # no such op
        else:
            rows = np.flatnonzero(stats.optype == code)
            if not rows.size:
                continue
            key = stats.op_cell[rows]  # (step_index * dp + dp_rank) * pp + stage, made once
            # each (step, worker)'s order statistic, by a partition where the cells hold alike
            q = worker_order_statistic(key, stats.transfer[rows], stats.n_steps * n_cells, FAST_OP_QUANTILE)
        present = np.isfinite(q)
        seen &= present & (np.where(present, q, 0.0) > 0)
        logs += np.log(np.maximum(np.where(present, q, 1.0), 1e-12))
        used += 1
    if not used:
        return np.ones((stats.n_steps, stats.dp, stats.pp))
    out = np.where(seen, np.exp(logs / used), 0.0)
    return out.reshape(stats.n_steps, stats.dp, stats.pp)


def fastest_op_ratios(stats: TraceStats, affected: np.ndarray, cells: list[tuple[int, int]]) -> np.ndarray:
    """(2, dp, pp) the log of each worker's fastest forward (row 0) and fastest backward (row 1) in
    the ``affected`` steps over the median of the same over its stage's workers outside ``cells``
    (``peer_reference``); NaN where the worker, or the job, has no such op.

    Why: a worker's fastest op of a window is the one least touched by a busy host (its process got
    the core for that op); a slow machine runs none of its ops as fast as its healthy peers do at
    their best, however many it runs. The minimum over n ops is a persistence test of its own: a
    healthy worker reads slow here only when every one of its ops in the window was slowed."""
    fastest = fastest_ops(stats, affected)
    ref = peer_reference(np.nan_to_num(fastest, nan=0.0), cells)  # (2, pp): one "step" per type
    return np.log(np.maximum(fastest, 1e-12) / np.maximum(ref, 1e-12)[:, None, :])


def fastest_ops(stats: TraceStats, affected: np.ndarray) -> np.ndarray:
    """(2, dp, pp) each worker's fastest forward (row 0) and fastest backward (row 1) duration in
    the ``affected`` steps; NaN where it has none."""
    dense = stats.order_statistics((FWD, BWD), 0.0, affected)  # from the dense layout, when it can
    if dense is not None:
        return np.stack(dense)
    out = np.full((2, stats.dp, stats.pp), np.nan)
    in_steps = affected[stats.op_step_index]
    for i, code in enumerate((FWD, BWD)):
        rows = np.flatnonzero((stats.optype == code) & in_steps)
        if rows.size:
            worker = stats.op_dp[rows].astype(np.int64) * stats.pp + stats.op_pp[rows]
            q = worker_order_statistic(worker, stats.transfer[rows], stats.dp * stats.pp, 0.0)
            out[i] = q.reshape(stats.dp, stats.pp)
    return out


def leave_one_out_ratios(values: np.ndarray) -> np.ndarray:
    """(K, dp, pp) the log of every cell's value over the median of its own stage's other DP ranks'
    (each cell left out of its own reference; ``values`` (K, dp, pp) positive, dp >= 2).

    The medians of the others are read from each (k, stage)'s DP ranks sorted once
    (``median_of_others``, the same values as ``median(np.delete(values, d, axis=1), axis=1)``)
    instead of a copy and a partition per DP rank (128 of each at 1.9M ops)."""
    k, dp, pp = values.shape
    if dp < 2:
        return np.full_like(values, np.nan)  # no other DP rank: no reference (a median of none)
    by_stage = np.ascontiguousarray(values.transpose(0, 2, 1)).reshape(k * pp, dp)
    others = median_of_others(by_stage).reshape(k, pp, dp).transpose(0, 2, 1)
    out: np.ndarray = np.log(values / others)
    return out


def faster_at_best(stats: TraceStats, cells: list[tuple[int, int]], affected: np.ndarray) -> bool:
    """Whether some cell ran its fastest forward or its fastest backward of the ``affected`` steps
    faster than its stage peers ran theirs, by more than ``MIN_EXCESS`` (``fastest_op_ratios``
    below ``-log(1 + MIN_EXCESS)``; within that it is as fast: timers and jitter): then it is no
    slow machine, whatever its step sums say. A busy host's descheduled process has slow steps but
    fast ops among them; a slow machine runs no op at better than its peers' best speed (one slow in
    some kernels only runs the others at their speed, not faster). Only cells with a stage peer
    outside ``cells`` are judged (a host that fills a stage has no like-for-like peer). False on a
    kernel-level job (``stats.microbatches`` False): its compute ops are segments of one pass cut
    at its collectives, whose lengths follow where the collectives fall, so one worker's fastest
    segment is not its peers' same op (``fast_step.starved_not_slow`` is that job's test)."""
    if not stats.microbatches:
        return False
    ratios = fastest_op_ratios(stats, affected, cells)
    inside = {(int(d), int(p)) for d, p in cells}
    for d, p in cells:
        if all((e, p) in inside for e in range(stats.dp)):
            continue  # no stage peer outside the cells: other stages' ops are not the same ops
        vals = ratios[:, d, p]
        if bool((vals[np.isfinite(vals)] < -np.log1p(MIN_EXCESS)).any()):
            return True
    return False


def fastest_optimizer_ratios(stats: TraceStats) -> np.ndarray | None:
    """(1, dp, pp) the log of each worker's fastest optimizer step of the window over the median of
    its stage's other DP ranks' fastest (``leave_one_out_ratios``); None without DP peers or
    without an optimizer step of positive length in every worker-step."""
    if stats.dp < 2 or stats.n_steps < 1:
        return None
    best = stats.optimizer.min(axis=0)[None]  # (1, dp, pp)
    if not (np.isfinite(best).all() and (best > 0).all()):
        return None
    return leave_one_out_ratios(best)


def optimizer_at_best(stats: TraceStats, cell: tuple[int, int]) -> bool:
    """Whether the cell's fastest optimizer step of the window ran at least ``FAST_OUTLIER_STEP``
    times its stage peers' fastest (``fastest_optimizer_ratios``): the third compute type slow at
    its best, as its fastest forward and backward are in ``floor_outlier``.

    Why: a slow machine slows every compute type (METHOD.md A6), the optimizer step too; a busy
    host deschedules some ops of some steps. On the seen healthy recordings (212 workers with DP
    peers) a worker's fastest optimizer step reads 1.5x its peers' in 5% of them, its fastest
    forward and backward both in 4%, and the three logs correlate at 0.13 or less: a reading of
    its own, which leaves 1 of the 212 slow in all three (an order statistic of one op per step,
    it is the optimizer's own persistence test)."""
    ratios = fastest_optimizer_ratios(stats)
    return ratios is not None and bool(ratios[0, cell[0], cell[1]] >= np.log(FAST_OUTLIER_STEP))


def fast_op_outlier_z(stats: TraceStats, cells: list[tuple[int, int]], affected: np.ndarray) -> float:
    """The smallest, over the cells, of the fast-op factor's (``fast_op_factors``) robust z among
    the workers outside ``cells``: distance from their median over the larger of their MAD
    (as a standard deviation) and ``FAST_OP_MIN_SIGMA``. -inf with fewer than two others or no
    forward/backward ops, and where the per-step fast ops' noise is compute's own
    (``fast_ops_are_step_sums``): then they are no second look at the machine."""
    if fast_ops_are_step_sums(stats, cells):
        return float("-inf")
    factor = fast_op_factors(stats, affected, cells)
    others = _outside(factor, cells, stats)
    others = others[np.isfinite(others)]
    if others.size < 2 or not all(np.isfinite(factor[d, p]) for d, p in cells):
        return float("-inf")
    med = float(median(others))
    sigma = max(1.4826 * float(median(np.abs(others - med))), FAST_OP_MIN_SIGMA)
    return float(min((factor[d, p] - med) / sigma for d, p in cells))


def unbiased_typical_sigma(floor: NoiseFloor, n_steps: int) -> float:
    """The spread step noise alone gives a median of ``n_steps`` ratios, the step floor read
    without the few-steps bias of the MAD around each worker's own median
    (``peers.median_mad_deflation``; a floor read through successive steps has no such bias)."""
    step = floor.step if floor.step_unbiased else floor.step / median_mad_deflation(floor.n_steps)
    return step * 1.25 / np.sqrt(max(n_steps, 1))


def fast_ops_are_step_sums(stats: TraceStats, cells: list[tuple[int, int]]) -> bool:
    """Whether the per-step fast ops (``fast_op_steps``) move with compute from step to step as
    one measurement: their noise correlation (``peers.noise_correlation``, ``cells`` left out)
    above ``FAST_OP_MAX_RHO``, unless every one of ``cells`` holds fast ops steadier than its own
    step sums (``steadier_at_best``: the step noise the others show did not reach the candidate's
    fastest ops). False without forward or backward ops in every worker-step.

    Why: where one factor per (step, worker) scales every op alike (whole steps slowed by CPU
    contention: the generator's step noise, 0.995-0.9998), a healthy worker whose few steps all
    ran long has fast ops as long as its step sums, so its fast-op factor repeats compute's
    evidence rather than adding to it (tune6 ``healthy-step-noise-6``: dp 2 x pp 11, 4 steps of
    +-30%, compute 2.2-2.8 sigma out, its fast ops 4.9 sigma, named a faulty machine). The
    example job's recordings (sporadic descheduling) correlate at 0-0.91, median 0.56."""
    fast = stats.shared("fast_op_steps", lambda: fast_op_steps(stats))
    if not (fast > 0).all():
        return False
    if noise_correlation(stats.compute, fast, cells) <= FAST_OP_MAX_RHO:
        return False
    # The others' fast ops follow their step sums; a candidate's own need not (the busy host
    # moved its peers' whole steps, its own steps in some ops only): then they are its second look.
    return not (cells and all(steadier_at_best(stats, fast, c, cells) for c in cells))


def steadier_at_best(stats: TraceStats, fast: np.ndarray, cell: tuple[int, int],
                     cells: list[tuple[int, int]]) -> bool:
    """Whether the cell's per-step fast-op ratio to its stage peers (``fast`` from
    ``fast_op_steps``, the other ``cells`` left out of the reference) moves from step to step at
    most ``FAST_STEADY`` times as much as its compute ratio does (root mean square deviation of
    each log ratio from its own mean), its compute ratio moving by at least ``MIN_EXCESS``, over at
    least ``JOINT_MIN_STEPS`` steps.

    Why: where one factor per worker-step scales every op alike (whole steps slowed), a worker's
    fastest ops carry that factor as its step sums do, plus the sampling noise of an order
    statistic of a few ops, so its fast-op ratio moves at least as much as its compute ratio. A
    fast-op ratio that moves half as much or less says the noise in this worker's step sums did not
    reach its fastest ops: sporadic descheduling in some of its ops, against which the fastest ops
    are the cleaner reading of its speed (``heldout12`` ``slow-rank-2x2``: rank 1's compute ratio
    moves by 0.165 in log units over four steps, its fast-op ratio, 3x its peer's, by 0.047)."""
    if stats.n_steps < JOINT_MIN_STEPS:
        return False
    rest = [c for c in cells if c != cell]
    rc = np.log(np.maximum(peer_ratio(stats.compute, cell, rest), 1e-12))
    rf = np.log(np.maximum(peer_ratio(fast, cell, rest), 1e-12))
    spread_c = float(np.sqrt(np.mean((rc - rc.mean()) ** 2)))
    spread_f = float(np.sqrt(np.mean((rf - rf.mean()) ** 2)))
    return spread_c >= np.log1p(MIN_EXCESS) and spread_f <= FAST_STEADY * spread_c


def small_job_outlier_bar(n_workers: int) -> float:
    """The joint (compute and optimizer) outlier bar: about sqrt(2 ln n) (where the slowest of n
    healthy workers sits) plus 2, and never above ``OUTLIER_Z`` (large fleets keep that bar)."""
    return float(min(OUTLIER_Z, np.sqrt(2.0 * np.log(max(n_workers, 2))) + 2.0))


def joint_outlier_z(stats: TraceStats, cells: list[tuple[int, int]], affected: np.ndarray,
                    floor: NoiseFloor, z_compute: float) -> float:
    """Compute's and the optimizer's outlier z-scores combined (each clipped at
    ``peers.JOINT_CLIP``, Stouffer's sum): two independent measurements of the same machine's
    speed. -inf without optimizer ops."""
    z_opt = optimizer_outlier_z(stats, cells, affected, floor)
    if not np.isfinite(z_opt):
        return float("-inf")
    parts = np.clip([z_compute, z_opt], -JOINT_CLIP, JOINT_CLIP)
    return float(parts.sum() / joint_scale(2, floor.joint_rho))



def consistently_slow(
    stats: TraceStats, cells: list[tuple[int, int]], affected: np.ndarray | None = None
) -> float:
    """The smallest, over the cells, of the larger of two fractions: the cell's forwards (or its
    backwards), in the ``affected`` steps, that take at least ``SLOW_OP`` times the median of the
    same (stage, chunk) ops of its peers (the cell itself left out; all of the stage's when it
    has no peer)."""
    worst = 1.0
    in_steps = np.ones(stats.n_ops, dtype=bool) if affected is None else affected[stats.op_step_index]
    for d, p in cells:
        best = 0.0
        for code in (FWD, BWD):
            here = (stats.optype == code) & (stats.op_dp == d) & (stats.op_pp == p) & in_steps
            peers = (stats.optype == code) & (stats.op_pp == p) & (stats.op_dp != d)
            if not peers.any():
                peers = (stats.optype == code) & (stats.op_pp == p)
            if not here.any():
                continue
            chunk = stats.op_gmc[here]
            frac = 0.0
            total = 0
            for g in unique(chunk):
                typical = float(median(stats.transfer[peers & (stats.op_gmc == g)]))
                vals = stats.transfer[here][chunk == g]
                frac += float((vals >= SLOW_OP * typical).sum())
                total += len(vals)
            best = max(best, frac / max(total, 1))
        worst = min(worst, best)
    return worst


def slow_positions(stats: TraceStats, cells: list[tuple[int, int]], affected: np.ndarray) -> float:
    """The smallest, over the cells, of the largest share of the ``affected`` steps in which the
    cell's forward at one position (``stats.op_mb``: its microbatch, or its place among the
    worker's forwards of the step) runs long without its backward (unmirrored excess at least
    ``POSITION_Z`` robust sigma and ``OUTLIER_REL`` of a typical forward, the GC detector's
    measure of a pause).

    A kernel-level job cuts one pass into segments at every collective (FSDP: one per layer), so
    a machine slow in one layer's forward kernels is slow in one segment of seven, but in that one
    in every step; a collector pauses a random forward in a random step, and a longer microbatch
    (sequence length) lengthens its backward too (real recordings: a rank sleeping in one layer's
    forward is long there in 6 of 6 steps)."""
    if stats.op_mb is None or not len(stats.fwd_index):
        return 0.0
    long = (stats.fwd_excess_z >= POSITION_Z) & (stats.fwd_excess >= OUTLIER_REL * stats.fwd_typical)
    rows = stats.fwd_index
    in_steps = affected[stats.op_step_index[rows]]
    n_aff = max(int(affected.sum()), 1)
    worst = 1.0
    for d, p in cells:
        mine = long & (stats.op_dp[rows] == d) & (stats.op_pp[rows] == p) & in_steps
        best = 0.0
        for pos in unique(stats.op_mb[rows][mine]):
            at = mine & (stats.op_mb[rows] == pos)
            best = max(best, len(unique(stats.op_step_index[rows][at])) / n_aff)
        worst = min(worst, best)
    return worst


def lengths_vary(stats: TraceStats) -> bool:
    """Whether the job's microbatches carry their own cost (``sequence_length.microbatch_coherence``
    at its bars ``COHERENCE`` and ``COHERENCE_Z``): the same microbatches are the long ones on
    every stage and pass, as variable sequence lengths make them. Then a worker whose forwards and
    backwards are slow while its optimizer step is normal may hold the longer data; only a slow
    optimizer too ("all compute types slow", METHOD.md A6) still points at its machine."""
    coherence, z = microbatch_coherence(stats)
    return coherence >= COHERENCE and z >= COHERENCE_Z



def job_floor(stats: TraceStats, exclude: list[tuple[int, int]]) -> NoiseFloor:
    """The job's noise floor of compute ratios (``peers.noise_floor``, the candidates left out),
    with the optimizer's step spread beside it when every worker-step has an optimizer op and its
    noise is not mostly compute's (``peers.noise_correlation`` at most ``JOINT_MAX_RHO``)."""
    floor = noise_floor(stats.compute, exclude=exclude)
    if stats.dp >= 2 and not _noise_sample_left(stats, exclude) and fast_ops_are_step_sums(stats, []):
        # No peer pair is left outside the candidates (two workers: DP 2 x PP 1), so the floor
        # was not measured; where whole steps move together (every op of a worker-step alike,
        # read over all the workers: nothing else is left) the pair's ratio, through the
        # differences of successive steps, reads the step noise, which a persistently slow
        # worker does not move (tune6 healthy-step-noise-few-1, job-stall-small-9: 3 steps of
        # +-40%, a healthy worker 1.2x its one peer named faulty-machine 0.99 on the 0.5%
        # floor). The real two-rank recordings' fast ops correlate with compute at 0.1-0.85:
        # they keep the unmeasured floor (kineto_plain_heldout8 ddp-slow-2rank, see
        # docs/ACCURACY.md "Held-out set 5").
        floor.step = max(floor.step, successive_step_spread(stats.compute))
        floor.step_unbiased = True
    if (stats.optimizer > 0).all():
        floor.optimizer = noise_floor(stats.optimizer, exclude=exclude).step
        # Independent only as far as the job's noise says: a per-worker-step slowdown (a busy
        # host's whole step) moves both, burst contention mostly one.
        floor.joint_rho = noise_correlation(stats.compute, stats.optimizer, exclude)
        if floor.joint_rho > JOINT_MAX_RHO:
            floor.optimizer = None  # mostly the same noise again: no second measurement
    return floor


def _timings(
    stats: TraceStats, report: Report
) -> tuple[list[CellTiming], list[int] | None, NoiseFloor] | None:
    """The candidate cells, each judged on its own: (timings of the slow ones, host cluster, floor).

    Hot cells of S_w that sit on exactly one host's workers are judged as a cluster against the
    workers off it (the host may fill a stage); other hot cells one by one against their stage
    peers, so a worker hot only because it waits on a slow peer drops out. A host that is exactly
    some whole stages is left to stage imbalance when the partition explains its compute."""
    candidates = hot_cells(report)
    if not candidates:
        return None
    floor = job_floor(stats, candidates)
    hosts = host_cluster(stats, candidates)
    if hosts is not None:
        cells = slow_cells(stats, candidates)
        if host_cluster(stats, cells) is None:
            return None
        rows = sorted({p for _, p in cells})
        whole = [r for r in rows if sum(1 for _, p in cells if p == r) == stats.dp]
        explained = partition_explains(stats.compute, stats.layers_per_stage, rows)
        if whole and len(whole) == len(rows) and explained:
            return None
        return [cell_timing(stats, c, floor, leave_out=cells) for c in cells], hosts, floor
    if stats.dp < 2:
        # One DP rank: no stage peers; compare with the other stages (peer_reference's fallback).
        cells = slow_cells(stats, candidates)
        if cells and partition_explains(stats.compute, stats.layers_per_stage, sorted({p for _, p in cells})):
            # Every cell is a whole stage, and the partition gives those stages more layers with
            # compute that follows the layer count: the stage imbalance's finding, as for a host
            # that is exactly some whole stages above.
            return None
        return [cell_timing(stats, c, floor, leave_out=cells) for c in cells], None, floor
    n_workers = stats.dp * stats.pp
    if len(candidates) > max(1, n_workers // 4):
        # S_w singles nobody out (on a busy host every worker's own noise costs the job about
        # as much): pick the suspects by their own compute against their stage peers instead.
        hot = candidates
        candidates = own_suspects(stats, max(1, n_workers // 4))
        if not candidates:
            return None
        if not _noise_sample_left(stats, hot):
            # Every stage was (nearly) all hot: no noise left to measure outside the hot set.
            floor = job_floor(stats, candidates)
    return own_slow(stats, candidates, floor), None, floor


def _noise_sample_left(stats: TraceStats, cells: list[tuple[int, int]]) -> bool:
    """Whether some stage keeps at least two workers outside ``cells`` (a peer pair whose ratios
    measure the noise floor)."""
    inside = {(int(d), int(p)) for d, p in cells}
    return any(sum((d, p) not in inside for d in range(stats.dp)) >= 2 for p in range(stats.pp))


def own_suspects(stats: TraceStats, limit: int) -> list[tuple[int, int]]:
    """Up to ``limit`` cells whose own compute is slowest against their stage peers: typical
    (median over steps) log ratio to the peers, each cell left out of its own reference, above 0
    and at least half the slowest cell's; slowest first. The candidates when S_w is hot nearly
    everywhere; ``own_slow`` and every later test still judge them against the noise floor."""
    typical = median(log_ratios(stats.compute), axis=0)  # (dp, pp), NaN without peers
    typical = np.where(np.isfinite(typical), typical, -np.inf)
    top = float(typical.max())
    if not np.isfinite(top) or top <= 0:
        return []
    order = np.argsort(-typical, axis=None)
    cells = [(int(i // stats.pp), int(i % stats.pp)) for i in order]
    return [c for c in cells if typical[c] >= 0.5 * top][:limit]


def _over_time(timings: list[CellTiming], hosts: list[int] | None) -> tuple[list[CellTiming], bool] | None:
    """The cells that are persistently slow, or else those slow from an onset on: (cells, onset).

    Judged per cell (one noisy neighbour does not sink a real straggler); a host's workers must all
    agree, as one machine's GPUs start throttling together."""
    persistent = [t for t in timings if t.onset is None and t.persist >= PERSIST_FRACTION]
    onset = [t for t in timings if t.onset is not None and t.persist >= PERSIST_FRACTION]
    if hosts is not None:
        if len(persistent) == len(timings):
            return persistent, False
        if len(persistent) + len(onset) == len(timings) and len(onset) >= len(timings) / 2:
            return timings, True
        return None
    if persistent:
        return persistent, False
    if onset:
        first = min(t.onset.index for t in onset if t.onset is not None)
        return [t for t in onset if t.onset is not None and t.onset.index <= first + 1], True
    return None


def window_rise(series: np.ndarray, m: int) -> np.ndarray:
    """(w,) for log ratios ``series`` (S, w), 0 < m < S: each column's largest rise over m
    consecutive steps, at any position: the window's lowest step over the larger of the other
    steps' mean and 0 (the peers' level). Every step of the window counts, so one spike is no
    rise, and a worker that got faster outside the window does not rise in it."""
    n = series.shape[0]
    best = np.full(series.shape[1], -np.inf)
    total = series.sum(axis=0)
    for a in range(n - m + 1):
        win = series[a:a + m]
        outside = (total - win.sum(axis=0)) / (n - m)
        best = np.maximum(best, win.min(axis=0) - np.maximum(outside, 0.0))
    return best


def onset_by_chance(stats: TraceStats, kept: list[CellTiming]) -> bool:
    """Whether the onset of the ``kept`` cells is one the job's own noise makes by chance.

    Two readings, each against workers that do not contain the candidates in their reference:

    - **Look-alikes.** For every other worker with stage peers left (its log ratio to them, the
      candidates left out of every reference), the largest rise over m consecutive steps at any
      position (``window_rise``), m the candidate's count of slow steps. One of at least
      ``ONSET_LOOKALIKE`` times the candidate's jump says a window of m slow steps is what this
      job's bursts make (set 7 healthy-step-bursts-0: dp 14 x pp 2, 4 steps, a
      worker hit by bursts in its last two steps, named an onset while four of its stage's other
      workers had two such steps in a row elsewhere). A throttling machine's onset stands alone.
    - **One peer.** With DP 2 a cell's ratio is to its one peer, and a peer that got faster reads
      as the cell getting slower. Each worker's log compute centred on its own median, the cell's
      over the median of the other stages' workers in each step: a slow machine's jump shows there
      too; under ``ONSET_WIDE`` of it says the peer moved (set 7 job-stall-small-5: 2 x 2, 5 steps
      of heavy step noise, rank 4 "slow since step 1002" while its peer ran 1.2-1.4x in the two
      steps before and the cell was flat against the other stage)."""
    onsets = [t for t in kept if t.onset is not None]
    if not onsets:
        return False
    n = stats.n_steps
    cells = [t.cell for t in kept]
    others = log_ratios(stats.compute, exclude=cells)  # (S, dp, pp), NaN without peers
    peered = others[:, np.isfinite(others).all(axis=0)]  # (S, w): the workers with peers left
    centred = None
    if stats.dp == 2 and stats.pp >= 2:
        # each worker's log compute about its own median, for the one-peer reading
        logs = np.log(np.maximum(stats.compute, 1e-12))
        centred = logs - median(logs, axis=0)[None]
    for t in onsets:
        assert t.onset is not None
        k = t.onset.index
        m = n - k
        jump = t.onset.after - t.onset.before
        if jump <= 0 or m >= n:
            continue
        if peered.shape[1] and float(window_rise(peered, m).max()) >= ONSET_LOOKALIKE * jump:
            return True
        if centred is not None:
            d, p = t.cell
            off = np.delete(centred, p, axis=2).reshape(n, -1)
            wide = centred[:, d, p] - median(off, axis=1)
            if float(np.mean(wide[k:]) - np.mean(wide[:k])) < ONSET_WIDE * jump:
                return True
    return False


def hottest_share(stats: TraceStats, cell: tuple[int, int], affected: np.ndarray) -> float:
    """The fraction of the ``affected`` steps in which the cell's compute over its stage peers'
    (``leave_one_out_ratios``, in logs: the cell left out of its own reference) exceeds the same of
    every worker off its stage (their own peers' reference, not the cell's); 1.0 where there is no
    such worker or no peer (one DP rank, one stage).

    Why off its stage: with DP 2 a stage peer's ratio mirrors the cell's; workers of the other
    stages measure the host's contention in that step independently of the cell."""
    if stats.dp < 2 or stats.pp < 2 or not affected.any():
        return 1.0
    lr = leave_one_out_ratios(np.maximum(stats.compute, 1e-12))[affected]  # (S', dp, pp)
    d, p = cell
    off = np.delete(lr, p, axis=2).reshape(lr.shape[0], -1)
    return float(np.mean(lr[:, d, p] > off.max(axis=1)))


def hottest_bar(stats: TraceStats) -> float:
    """The share of steps ``hottest_share`` must reach: ``HOTTEST_CHANCE`` times the chance that one
    of the n + 1 exchangeable workers (the cell and the n = dp (pp - 1) off its stage) is the hottest
    in a step, at most ``HOTTEST_SHARE``. Why by chance: in a large job some worker off the stage is
    hotter than a mildly slow machine in most steps by noise alone; what a slow machine shows is
    being the hottest more often than its share."""
    n_off = stats.dp * max(stats.pp - 1, 0)
    return float(min(HOTTEST_SHARE, HOTTEST_CHANCE / (n_off + 1)))


def _normal_step(stats: TraceStats, kept: list[CellTiming], floor: NoiseFloor) -> bool:
    """Whether a persistently slow candidate ran at its normal speed in some step, where whole
    steps move together (``fast_ops_are_step_sums``): a step whose ratio to its peers sits more
    than ``small_job_outlier_bar(steps)`` unbiased step sigmas (``peers.median_mad_deflation``)
    under the candidate's typical ratio, further down than the lowest of its steps would by
    noise.

    Why: a slow machine is slow in every step, by its factor and the job's step noise; bursts of
    contention (a process losing its cores for a step now and then) make a healthy worker slow in
    the steps they hit and normal in the others, and the step floor, a MAD, does not see bursts
    that hit few steps (tune6 healthy-step-bursts-2: dp 12 x pp 2, a worker hit in 3 of 4 steps,
    typical 0.42 on a floor of 2%, its fourth step at its peers' level, named faulty-machine 0.59)."""
    if not fast_ops_are_step_sums(stats, [t.cell for t in kept]):
        return False
    reach = small_job_outlier_bar(stats.n_steps) * unbiased_typical_sigma(floor, 1) / 1.25
    for t in kept:
        d, p = t.cell
        own = np.log(np.maximum(stats.compute[:, d, p], 1e-12))
        # ... and normal in its own compute too, not only against its peers: with DP 2 the
        # reference is one peer, and a burst on that peer brings a slow machine's ratio down
        # to 1 in that step (tune6 faulty-weak-bursts-10, -11)
        normal = (t.r < t.typical - reach) & (own < float(median(own)) - reach)
        if normal.any():
            return True
    return False


def every_step_chance(stats: TraceStats, kept: list[CellTiming]) -> float | None:
    """The expected count of the job's N workers that its own step noise puts as high as a
    persistently slow candidate in every one of the n steps, N q^n: q is the share of the other
    workers' (step, worker) log ratios (their own stage peers' reference, the candidates left out
    of every reference) at half the candidate's typical log ratio or more. The largest over the
    ``kept`` candidates that are at that height in every step; None where none is (an onset, a
    step under that height: ``_normal_step`` reads those) or no other worker has peers left.
    Assumes the (step, worker) excursions independent, as bursts of contention are."""
    lr = log_ratios(stats.compute, exclude=[t.cell for t in kept])
    others = lr[:, np.isfinite(lr).all(axis=0)]  # (S, w)
    if not others.size:
        return None
    n_workers = stats.dp * stats.pp
    best: float | None = None
    for t in kept:
        height = 0.5 * t.typical
        if t.onset is not None or height <= 0 or not bool((t.r >= height).all()):
            continue
        q = float(np.mean(others >= height))
        chance = n_workers * q**stats.n_steps
        best = chance if best is None else max(best, chance)
    return best


def every_step_by_chance(stats: TraceStats, kept: list[CellTiming]) -> bool:
    """Whether a persistently slow candidate, hot in every step, is what the job's own noise makes
    by chance: ``every_step_chance`` at least ``EVERY_STEP_CHANCE``.

    Why: a slow machine is hot in every step, but with many workers and few steps so is some
    healthy worker under bursts: set 8 ``healthy-step-bursts-9`` and set 13 ``healthy-step-bursts-3``
    (dp 16 x pp 11, 3 steps, bursts on 13% and 19% of the pairs): one of 176 workers hot in all
    three, N q^n 0.38 and about 1, named faulty-machine 0.385 and 0.36. The seen true machines hot in
    every step score 0.05 or less where they are clear cases; the test only bites where N is large
    against the steps."""
    chance = every_step_chance(stats, kept)
    return chance is not None and chance >= EVERY_STEP_CHANCE


def chance_alike(stats: TraceStats, t: CellTiming, floor: NoiseFloor) -> bool:
    """Whether one worker's slow steps are what the job's own noise makes by chance, by the tests
    ``detect`` puts a single worker's timing through: an onset another worker's rise matches
    (``onset_by_chance``), a persistent slowness with a step at normal speed (``_normal_step``), or
    one hot in every step where the job's bursts make such a worker by chance
    (``every_step_by_chance``).
    A weaker finding passes the same tests as a primary (set 11 healthy-step-noise-few-10 and
    healthy-step-bursts-9: onsets by chance, named by the outlier-worker finding alone).

    ``hottest_share`` is not asked here: in a large job under bursts a weak machine is rarely the
    hottest worker of a step (seen faulty-weak-bursts jobs at 0.0 of a 0.012-0.017 bar)."""
    if t.onset is not None:
        return onset_by_chance(stats, [t])
    return _normal_step(stats, [t], floor) or every_step_by_chance(stats, [t])


@register(CauseId.FAULTY_MACHINE)
def detect(report: Report, stats: TraceStats) -> CauseMatch | None:
    """Match persistently hot cells (or cells hot from an onset on), clustered by host when a
    host's workers are hot together."""
    if report.slowdown < DECOMPOSE_THRESHOLD:
        return None
    found = _timings(stats, report)
    if found is None:
        return None
    timings, _, floor = found
    if not timings:
        return None
    cells = [t.cell for t in timings]
    n_workers = stats.dp * stats.pp
    hosts = host_cluster(stats, cells)
    rows = sorted({p for _, p in cells})
    whole_rows = [r for r in rows if sum(1 for _, p in cells if p == r) == stats.dp] if stats.dp >= 2 else []
    # Not a host: one or a few cells, and never a whole PP row (stage imbalance's signature).
    if hosts is None and (len(cells) > max(1, n_workers // 4) or whole_rows):
        return None
    timed = _over_time(timings, hosts)
    if timed is None:
        return None
    kept, is_onset = timed
    if not is_onset and _normal_step(stats, kept, floor):
        return None
    if not is_onset and (hosts is None or len(kept) == 1) and every_step_by_chance(stats, kept):
        return None
    # A "host" of one traced worker (a worker wider than a host: tp x cp GPUs over several) is
    # judged as the worker it is: the chance tests below compare one worker with the others.
    if is_onset and (hosts is None or len(kept) == 1) and onset_by_chance(stats, kept):
        return None
    cells = [t.cell for t in kept]
    hosts = host_cluster(stats, cells)
    affected = np.ones(stats.n_steps, dtype=bool)
    if is_onset:
        affected[: min(t.onset.index for t in kept if t.onset is not None)] = False
    one_worker = hosts is None or len(cells) == 1
    if one_worker and any(hottest_share(stats, c, affected) < hottest_bar(stats) for c in cells):
        # A slow machine is slow in every step it is slow in, so in more of them than chance it runs
        # further over its peers than any worker off its stage; a busy host's contention moves from
        # worker to worker, and a worker it slows shares its hot steps with others as hot (heldout2
        # healthy-2x4: rank 6 at 2.90x, 2.20x, 1.30x, 1.09x its peer, but in each step another
        # stage's worker further over its own: named faulty-machine 0.41 on a healthy job).
        return None
    persist = float(min(t.persist for t in kept))
    peer_ratio_v = float(np.mean(compute_ratios(stats, cells)[affected]))
    if peer_ratio_v - 1.0 < FAULT_MIN_EXCESS:
        # Its compute is no slower than its peers' (e.g. one DP rank, compared with the other
        # stage, where no spread is left to call it an outlier against), or only by a healthy
        # fleet's spread (set 7 job-stall-small-4: 2 x 2, a GPU 2.3% slower than its one peer on
        # a 0.5% step floor, named faulty-machine 0.99): nothing of a machine.
        return None
    z = outlier_z(stats, cells, affected, floor)
    # The slowest of a normal spread of GPU speeds is not a faulty machine. On a busy host a few
    # steps of compute cannot put a real one 5 sigma out; with its optimizer step as a second
    # measurement a small job's bar (about where its slowest healthy worker sits, plus 2) holds.
    # Not from two steps: a median of two noisy ratios is no speed factor.
    # The fast-op factor (``fast_op_factors``) may stand in compute's place: the same ops, read
    # where the host's descheduling noise is small (alone at OUTLIER_Z, or with the optimizer).
    # Alone, only beside compute that stands out of the job's own noise floor at all
    # (``FAST_OUTLIER_SW_Z``): a slow machine lengthens every op, so its step sums stand out too;
    # fastest ops slow in a worker whose compute sits inside the floor are a few descheduled ops
    # (heldout13 healthy-4x2: fast ops 5.6 sigma out, compute 1.07x its peers at 0.99 sigma, named
    # faulty-machine; the seen slow machines this reading carries stand 2.15 sigma out or more).
    z_fast = fast_op_outlier_z(stats, cells, affected) if int(affected.sum()) >= JOINT_MIN_STEPS else -np.inf
    joint_ok = int(affected.sum()) >= JOINT_MIN_STEPS and (
        (z_fast >= OUTLIER_Z and z >= FAST_OUTLIER_SW_Z)
        or joint_outlier_z(stats, cells, affected, floor, z) >= small_job_outlier_bar(n_workers)
        or joint_outlier_z(stats, cells, affected, floor, z_fast) >= small_job_outlier_bar(n_workers)
    )
    # ... or with one op position slow in nearly every step as the second measurement (a slow
    # layer of a kernel-level job, which leaves the optimizer step alone)
    position_ok = (not joint_ok and int(affected.sum()) >= JOINT_MIN_STEPS
                   and z >= small_job_outlier_bar(n_workers)
                   and slow_positions(stats, cells, affected) >= CONSISTENT_FRACTION)
    if z < OUTLIER_Z and not joint_ok and not position_ok:
        return None
    if not np.isfinite(z) and min(t.typical for t in kept) < small_job_outlier_bar(n_workers) * (
        unbiased_typical_sigma(floor, int(affected.sum()))
    ):
        # Nobody to compare with (a two-worker job): the outlier test cannot fail, so the worker
        # must at least stand out of the job's own step noise as the slowest of n healthy workers
        # would not (tune6 job-stall-small-5: dp 1 x pp 2, 5 steps of +-43%, a stage 1.13x the
        # other on a measured step floor of 24% named faulty-machine 0.73).
        return None
    if min(t.typical for t in kept) < small_job_outlier_bar(n_workers) * floor.fleet_sigma():
        # Within the healthy machines' own persistent spread (``NoiseFloor.fleet_sigma``, each
        # worker left out of its own reference): the slowest of a noisy healthy fleet (set 3
        # healthy-noisy-8: a GPU 2.6% slower, 3.7 such sigma out of 17 peers) is no faulty machine.
        return None
    # "All compute types on that worker are slow" (METHOD.md A6): a slow GPU also slows its
    # optimizer step, which no data or schedule imbalance touches.
    opt_ratio = optimizer_ratio(stats, cells, affected)
    opt_slow = opt_ratio is None or opt_ratio - 1.0 >= 0.25 * (peer_ratio_v - 1.0)
    consistent = None if opt_slow else consistently_slow(stats, cells, affected)
    if consistent is not None and consistent < CONSISTENT_FRACTION and (
        slow_positions(stats, cells, affected) < CONSISTENT_FRACTION
    ):
        # Neither every compute type nor every op of one type is slow: data or pauses, not a machine.
        return None
    if consistent is not None and lengths_vary(stats):
        # Only forwards and backwards slow (the optimizer normal) in a job whose microbatches carry
        # their own cost: that is what longer data does; it is no evidence for the hardware.
        return None
    if starved_not_slow(stats, cells):
        # kernel-level: a process descheduled sporadically, its best step not slow (fast_step.py)
        return None
    if faster_at_best(stats, cells, affected):
        # Its fastest op beat its peers' fastest: the machine runs at full speed when it gets the
        # core; its slow steps are the host's contention, not its hardware.
        return None
    share, compute_share = worker_shares(stats, report, cells)
    # The machine's compute must hold the slowdown; slow transfers are slow communication's.
    if compute_share < MIN_SHARE:
        return None
    return _match(report, stats, cells, hosts, rows, whole_rows, persist, peer_ratio_v, z, opt_ratio,
                  opt_slow, consistent, share, compute_share, floor, affected if is_onset else None)



def _match(
    report: Report, stats: TraceStats, cells: list[tuple[int, int]], hosts: list[int] | None,
    rows: list[int], whole_rows: list[int], persist: float, peer_ratio_v: float, z: float,
    opt_ratio: float | None, opt_slow: bool, consistent: float | None, share: float,
    compute_share: float, floor: NoiseFloor, onset_steps: np.ndarray | None,
    outlier_only: float | None = None,
) -> CauseMatch:
    """The faulty-machine match: confidence, location, summary and evidence. ``outlier_only`` (the
    worker's S_w z-score) marks the weaker finding of :func:`outlier_worker`."""
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
    if outlier_only is not None:
        # Not every faulty-machine test holds: the confidence says so (at most ~0.45).
        fit *= 0.5
    step_ids = None if onset_steps is None else [int(s) for s in stats.steps[onset_steps]]
    loc = stats.location(cells, step_ids)
    names = ", ".join(f"dp {d}/pp {p}" for d, p in sorted(cells)[:6])
    more = f" and {len(cells) - 6} more" if len(cells) > 6 else ""
    host_txt = f"host {loc.hosts[0]}" if len(loc.hosts) == 1 else f"hosts {loc.hosts}"
    one = len(cells) == 1
    if step_ids is not None:
        timing = (
            f"{'has' if one else 'have'} been slow since step {step_ids[0]} ({len(step_ids)} of the "
            f"{n_steps} traced steps; normal before): compute runs {peer_ratio_v:.2f}x the stage peers' "
            "since then"
        )
    elif one_step:
        timing = (
            f"{'is' if one else 'are'} slow: compute runs {peer_ratio_v:.2f}x the stage peers' in the one "
            "traced step (whether it persists cannot be checked)"
        )
    else:
        timing = (
            f"{'is' if one else 'are'} persistently slow: compute runs {peer_ratio_v:.2f}x the stage "
            f"peers' in {persist * 100:.0f}% of the {n_steps} steps"
        )
    lead = (
        ""
        if outlier_only is None
        else f"An outlier worker, not a proven fault: its per-worker slowdown stands {outlier_only:.1f} "
        f"robust sigma above the other workers' and its speed {z:.1f} sigma outside the job's noise floor "
        f"(step-to-step spread {floor.step * 100:.0f}%), but not every sign of a faulty machine holds. "
    )
    summary = lead + (
        f"{'One worker' if one else f'{len(cells)} workers'} ({names}{more}; {host_txt}"
        f"{', every traced GPU of the host' if hosts is not None and not one else ''}) "
        + timing
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
        pattern=Pattern(
            spatial=spatial,
            temporal=Temporal.ONSET if step_ids is not None else Temporal.PERSISTENT,
            resource=Resource.COMPUTE,
        ),
        evidence={
            "hot_cells": [f"{d},{p}" for d, p in sorted(cells)],
            "host_cluster": hosts if hosts is not None else [],
            "worker_slowdown_max": rounded(float(worker_matrix(report, "exact").max())),
            "peer_compute_ratio": rounded(peer_ratio_v),
            "optimizer_ratio": rounded(opt_ratio) if opt_ratio is not None else None,
            "persistent_step_fraction": rounded(persist),
            "outlier_z": rounded(z, 2) if np.isfinite(z) else None,
            "consistently_slow_op_fraction": rounded(consistent) if consistent is not None else None,
            "fix_share": rounded(share),
            "fix_share_compute": rounded(compute_share),
            "m_w": rounded(m_w) if m_w is not None else None,
            "noise_floor_step": rounded(floor.step),
            "noise_floor_worker": rounded(floor.worker),
            "onset_step": step_ids[0] if step_ids is not None else None,
            "affected_steps": step_ids,
            "signature": "outlier-worker" if outlier_only is not None else "faulty-machine",
            "worker_slowdown_z": rounded(outlier_only, 2) if outlier_only is not None else None,
        },
        summary=summary,
        categories=categories_for(CauseId.FAULTY_MACHINE),
    )


@register_fallback
def outlier_worker(report: Report, stats: TraceStats) -> CauseMatch | None:
    """The finding when no cause signature matched but one worker stands out of the job's noise.

    The hottest S_w cell is reported (as a low-confidence faulty machine, evidence ``signature:
    outlier-worker``) when its S_w is at least ``max(FALLBACK_Z, sqrt(2 ln n) + 0.5)`` robust sigma
    above the other n - 1 cells' (the slowest of n healthy workers sits ~sqrt(2 ln n) out), its
    own compute is slow against its peers in every step and above the noise floor (``OWN_Z``
    standard errors, in compute alone or in compute and optimizer together), its speed
    factor is as far out of the others', idealising its compute removes at least ``MIN_SHARE`` of
    the slowdown, its optimizer is slow too or at least half (not 90%) of its forwards or
    backwards are, and its steps pass the chance tests ``detect`` puts one worker through
    (``chance_alike``). Never "within noise" while such a worker exists: under the decomposition
    threshold too (S below ``DECOMPOSE_THRESHOLD``, where no detector judges anything), when the
    worker stands ``SUB_THRESHOLD_SW_Z`` robust sigma above the others and its own S_w excess is
    at least ``SUB_THRESHOLD_EXCESS`` (real recordings: a 20 ms onset on one rank of a 2x4 job at
    S = 1.022, S_w 1.105 and 14 sigma out). Where its step sums do not
    single it out (the own-compute test fails, or its S_w is under that bar but at least
    ``FAST_OUTLIER_SW_Z`` out), its fastest ops may (``_fast_op_outlier``)."""
    if report.slowdown <= 1.0 or stats.dp * stats.pp < 3:
        return None
    m = worker_matrix(report, "exact")  # (pp, dp)
    p, d = (int(x) for x in np.unravel_index(int(np.argmax(m)), m.shape))
    others = np.delete(m.reshape(-1), p * stats.dp + d)
    med = float(median(others))
    sw_z = (float(m[p, d]) - med) / max(1.4826 * float(median(np.abs(others - med))), 1e-3)
    sub = report.slowdown < DECOMPOSE_THRESHOLD
    if sub and (sw_z < SUB_THRESHOLD_SW_Z or float(m[p, d]) - 1.0 < SUB_THRESHOLD_EXCESS):
        # Under the decomposition threshold only a worker far outside the others, whose own
        # slowdown is real, is judged (a job slowed 2% whose S_w names one worker 14 sigma out).
        return None
    # The slowest of n healthy workers sits about sqrt(2 ln n) sigma out: the bar grows with n.
    bar = max(FALLBACK_Z, float(np.sqrt(2.0 * np.log(max(stats.dp * stats.pp, 2)))) + 0.5)
    cell = (d, p)
    if sw_z < bar:
        return _fast_op_outlier(report, stats, cell, sw_z) if sw_z >= FAST_OUTLIER_SW_Z else None
    floor = job_floor(stats, [cell])
    t = cell_timing(stats, cell, floor)
    # The weaker finding needs the worker slow in every (affected) step, not 3/4 of them: with a
    # few steps of heavy noise a healthy worker is above its peers in most steps by chance. Its own
    # compute must stand above the floor as in ``own_slow``: alone, or with its optimizer step as
    # the second measurement of the same machine (``joint_typical_z``).
    least = np.log(1.0 + MIN_EXCESS)
    own = t.typical >= max(OWN_Z * floor.typical_sigma(), least) or (
        t.typical >= least and joint_typical_z(stats, t, floor) >= OWN_Z
    )
    if not own or t.persist < 1.0:
        return _fast_op_outlier(report, stats, cell, sw_z)
    if chance_alike(stats, t, floor):
        return None
    if t.typical < small_job_outlier_bar(stats.dp * stats.pp) * floor.fleet_sigma():
        return None  # within the healthy machines' own spread, as in ``detect``
    if float(np.mean(np.exp(t.r[t.affected]))) - 1.0 < FAULT_MIN_EXCESS:
        return None  # a healthy fleet's few percent, as in ``detect``
    if starved_not_slow(stats, [cell]):
        return None  # kernel-level: a starved process, its best forward not slow (fast_step.py)
    affected = t.affected
    z = outlier_z(stats, [cell], affected, floor)
    if fast_ops_are_step_sums(stats, [cell]):
        # Whole steps move together: no second look (fast ops, optimizer) backs the step sums,
        # so the speed factor must clear the bar of ``detect``'s joint test, not the slowest of
        # n healthy workers plus half a sigma (tune6 healthy-step-noise-few-0: dp 8, 5 steps of
        # +-46%, a healthy worker 2.6 sigma out against a bar of 2.5).
        bar = max(bar, small_job_outlier_bar(stats.dp * stats.pp))
    if z < bar:
        return None
    share, compute_share = worker_shares(stats, report, [cell])
    if compute_share < MIN_SHARE:
        return None
    peer_ratio_v = float(np.mean(compute_ratios(stats, [cell])[affected]))
    opt_ratio = optimizer_ratio(stats, [cell], affected)
    opt_slow = opt_ratio is None or opt_ratio - 1.0 >= 0.25 * (peer_ratio_v - 1.0)
    consistent = None if opt_slow else consistently_slow(stats, [cell], affected)
    if consistent is not None and consistent < 0.5 * CONSISTENT_FRACTION:
        # Neither its optimizer nor most of its kernels are slow: a few heavy-tailed ops, not a worker.
        return None
    if consistent is not None and lengths_vary(stats):
        return None  # its optimizer normal and the microbatches' lengths vary: data, as in ``detect``
    if faster_at_best(stats, [cell], affected):
        return None  # its fastest op beat its peers' fastest, as in ``detect``
    return _match(report, stats, [cell], None, [p], [], t.persist, peer_ratio_v, z, opt_ratio,
                  opt_slow, consistent, share, compute_share, floor,
                  affected if t.onset is not None else None, outlier_only=sw_z)


def _fast_op_outlier(
    report: Report, stats: TraceStats, cell: tuple[int, int], sw_z: float
) -> CauseMatch | None:
    """The outlier-worker finding read from the worker's fastest ops, when its step sums do not
    single it out (``outlier_worker``'s own-compute test failed, or its S_w stands under that
    finding's bar but at least ``FAST_OUTLIER_SW_Z`` robust sigma above the others).

    Why: on a busy 2-core host the step sums of identical ranks move by +-50% or more (step floor
    up to 80%), so a DP-2 worker sleeping 15 ms in every op can read at or below its peer's compute
    in most steps while every one of its fastest ops runs 1.8-4.5x its peer's. Reported (at the
    outlier-worker finding's low confidence, evidence ``fast_op_factor`` and
    ``fast_op_min_step_ratio``) when S_w names the worker, its fast-op factor
    (``fast_op_factors``) stands at least ``OUTLIER_Z`` robust sigma out of the other workers'
    (``fast_op_outlier_z``), its per-step fast ops (``fast_op_steps``) are at least
    ``FAST_OUTLIER_STEP`` times its stage peers' in every step, the job's microbatches carry no
    cost of their own (``lengths_vary``: longer data lengthens a worker's fastest ops too), and
    idealising its compute removes at least ``MIN_SHARE`` of the slowdown. None with one traced
    step, without DP peers, or without pipeline stages: a data-parallel-only job's worker is the
    fast-step finding's to judge (``fast_step``, the next fallback), from its whole steps."""
    if stats.n_steps < 2 or stats.dp < 2 or stats.pp < 2:
        return None
    affected = np.ones(stats.n_steps, dtype=bool)
    z_fast = fast_op_outlier_z(stats, [cell], affected)
    if z_fast < OUTLIER_Z:
        return None
    fast = stats.shared("fast_op_steps", lambda: fast_op_steps(stats))
    if not (fast > 0).all():
        return None
    per_step = peer_ratio(fast, cell)
    if float(per_step.min()) < FAST_OUTLIER_STEP or lengths_vary(stats):
        return None
    share, compute_share = worker_shares(stats, report, [cell])
    if compute_share < MIN_SHARE:
        return None
    floor = job_floor(stats, [cell])
    t = cell_timing(stats, cell, floor)
    peer_ratio_v = float(np.mean(compute_ratios(stats, [cell])))
    opt_ratio = optimizer_ratio(stats, [cell], affected)
    opt_slow = opt_ratio is None or opt_ratio - 1.0 >= 0.25 * (peer_ratio_v - 1.0)
    match = _match(report, stats, [cell], None, [cell[1]], [], t.persist, peer_ratio_v, z_fast, opt_ratio,
                   opt_slow, None if opt_slow else consistently_slow(stats, [cell], affected), share,
                   compute_share, floor, None, outlier_only=sw_z)
    factor = float(np.exp(fast_op_factors(stats, affected, [cell])[cell]))
    match.evidence["fast_op_factor"] = rounded(factor)
    match.evidence["fast_op_min_step_ratio"] = rounded(float(per_step.min()))
    match.summary = (
        f"An outlier worker read from its fastest ops: dp {cell[0]}/pp {cell[1]}'s fastest forwards and "
        f"backwards run {factor:.2f}x its stage peers' ({z_fast:.1f} robust sigma out of the other "
        f"workers'; at least {float(per_step.min()):.2f}x in every one of the {stats.n_steps} steps), "
        f"and its per-worker slowdown is the job's highest ({sw_z:.1f} robust sigma above the others'), "
        "while its step compute is lost in the host's step-to-step noise (floor "
        f"{floor.step * 100:.0f}%). A slow machine lengthens every op, its fastest too; a busy host's "
        "descheduling only some. Not every sign of a faulty machine holds, hence the low confidence. "
        f"Idealising only it removes {share * 100:.0f}% of the slowdown ({compute_share * 100:.0f}% from "
        "compute alone); check its GPU health, clocks and host load."
    )
    return match


@register_fallback
def floor_outlier(report: Report, stats: TraceStats) -> CauseMatch | None:
    """The outlier-worker finding read from each worker's fastest op of the window, when no cause
    matched and the step sums (and S_w) name nobody.

    Why: on a busy 2-core host (step floors of 45-61%) a worker sleeping 10 ms in every op need not
    be S_w's hottest, nor slow in every step's compute, so every finding that starts from S_w's
    hottest cell misses it. Its fastest op is another matter: a slow machine runs none of its ops
    as fast as its peers at their best (``fastest_op_ratios``), and over a window of n ops the
    minimum is itself a persistence test (a healthy worker reads slow only if all n were slowed).
    The worker whose fastest forward and backward stand highest over its stage peers' (each cell
    left out of its own reference) is reported, at the outlier-worker finding's low confidence
    (evidence ``signature: outlier-worker``, ``fastest_op_factors``), when each of the two is at
    least ``FAST_OUTLIER_STEP`` (1.5x) its peers', its log excess is at least ``FLOOR_GAP`` (2)
    times the next worker's (it stands alone), the microbatches carry no cost of their own
    (``lengths_vary``), idealising its compute removes at least ``MIN_SHARE`` of the slowdown, and
    the job's per-step fast ops are a reading of their own (their step noise correlates with
    compute's at most ``FAST_OP_MAX_RHO``, as for ``_fast_op_onset``). Where its fastest optimizer
    step runs at least ``FAST_OUTLIER_STEP`` its peers' too (``optimizer_at_best``, evidence
    ``fastest_optimizer_factor``), it may stand alone in the mean of the three readings instead
    (the same ``FLOOR_GAP``, the same worker first), and its compute's share need only be real
    beside the host's noise (``base.real_share``: 5% of the ideal step).
    Microbatched pipeline jobs with DP peers and at least two steps only, at or above the
    decomposition threshold: a data-parallel-only or kernel-level job's worker is the fast-step
    finding's to judge."""
    if report.slowdown < DECOMPOSE_THRESHOLD or stats.n_steps < 2 or stats.dp < 2 or stats.pp < 2:
        return None
    if not stats.microbatches:
        return None  # segments of a kernel-level pass are no like-for-like ops (``faster_at_best``)
    fastest = fastest_ops(stats, np.ones(stats.n_steps, dtype=bool))
    if not (np.isfinite(fastest).all() and (fastest > 0).all()):
        return None
    logs = leave_one_out_ratios(fastest)  # (2, dp, pp)
    score = logs.mean(axis=0).reshape(-1)
    order = np.argsort(-score)
    d, p = divmod(int(order[0]), stats.pp)
    runner_up = float(score[order[1]])
    if float(logs[:, d, p].min()) < np.log(FAST_OUTLIER_STEP):
        return None
    cell = (d, p)
    # The optimizer step's fastest of the window, the third compute type (METHOD.md A6: a slow
    # machine slows every compute type; a busy host deschedules some ops of some steps). Slow at
    # its best too, it is a third reading of the same machine, which the two bars set for two
    # readings (standing alone, the share) may count: a worker alone in all three, a machine whose
    # compute costs the job a real effect beside the busy host's (``real_share``).
    third = optimizer_at_best(stats, cell)
    alone = runner_up <= 0 or float(score[order[0]]) >= FLOOR_GAP * runner_up
    opt_logs = fastest_optimizer_ratios(stats)
    if not alone and third and opt_logs is not None:
        # ... read with the fastest forward and backward, the worker stands alone in all three
        score3 = np.concatenate([logs, opt_logs]).mean(axis=0).reshape(-1)
        order3 = np.argsort(-score3)
        next3 = float(score3[order3[1]])
        top3 = float(score3[order3[0]])
        alone = int(order3[0]) == int(order[0]) and (next3 <= 0 or top3 >= FLOOR_GAP * next3)
    if not alone:
        return None
    if lengths_vary(stats):
        return None
    fast = stats.shared("fast_op_steps", lambda: fast_op_steps(stats))
    if not (fast > 0).all() or noise_correlation(stats.compute, fast, [cell]) > FAST_OP_MAX_RHO:
        # One factor per worker-step moves every op of the step alike (the generator's step noise):
        # the window's fastest op is then one of a few step factors, no reading of its own.
        return None
    share, compute_share = worker_shares(stats, report, [cell])
    if compute_share < MIN_SHARE and not (third and real_share(compute_share, stats.probe)):
        return None
    m = worker_matrix(report, "exact")  # (pp, dp)
    others = np.delete(m.reshape(-1), p * stats.dp + d)
    med = float(median(others))
    sw_z = (float(m[p, d]) - med) / max(1.4826 * float(median(np.abs(others - med))), 1e-3)
    affected = np.ones(stats.n_steps, dtype=bool)
    floor = job_floor(stats, [cell])
    t = cell_timing(stats, cell, floor)
    peer_ratio_v = float(np.mean(compute_ratios(stats, [cell])))
    opt_ratio = optimizer_ratio(stats, [cell], affected)
    opt_slow = opt_ratio is None or opt_ratio - 1.0 >= 0.25 * (peer_ratio_v - 1.0)
    consistent = None if opt_slow else consistently_slow(stats, [cell], affected)
    factors = np.exp(logs[:, d, p])
    z = fast_op_outlier_z(stats, [cell], affected)
    match = _match(report, stats, [cell], None, [p], [], t.persist, peer_ratio_v, z, opt_ratio,
                   opt_slow, consistent, share, compute_share, floor, None, outlier_only=sw_z)
    match.evidence["fastest_op_factors"] = [rounded(float(factors[0])), rounded(float(factors[1]))]
    match.evidence["fastest_op_runner_up"] = rounded(float(np.exp(runner_up)))
    match.evidence["fastest_optimizer_factor"] = (
        rounded(float(np.exp(opt_logs[0, d, p]))) if opt_logs is not None else None
    )
    third_txt = (
        f" Its fastest optimizer step ran {float(np.exp(opt_logs[0, d, p])):.2f}x its peers' too (every "
        "compute type slow at its best)."
        if third and opt_logs is not None
        else ""
    )
    match.summary = (
        f"An outlier worker read from its fastest ops: dp {d}/pp {p}'s fastest forward of the window ran "
        f"{factors[0]:.2f}x and its fastest backward {factors[1]:.2f}x its stage peers' fastest (the next "
        f"worker's {np.exp(runner_up):.2f}x), so none of its ops ran at its peers' best speed, while its "
        f"step compute and per-worker slowdown are lost in the host's step-to-step noise (floor "
        f"{floor.step * 100:.0f}%; S_w {sw_z:.1f} robust sigma from the others'). A slow machine lengthens "
        "every op; a busy host's descheduling leaves some at full speed. Not every sign of a faulty machine "
        f"holds, hence the low confidence.{third_txt} Idealising only it removes {share * 100:.0f}% of the "
        f"slowdown ({compute_share * 100:.0f}% from compute alone); check its GPU health, clocks and host "
        "load."
    )
    return match


@register_beside
def outlier_in_row(report: Report, stats: TraceStats, matches: list[CauseMatch]) -> CauseMatch | None:
    """The outlier-worker finding (``outlier_worker``) beside a stage imbalance that holds its
    worker, when that stage's load does not explain the worker.

    An uneven partition (or the last stage's head and loss) slows every DP rank of the stage alike;
    it does not put one of them far above its stage peers, nor make its fastest ops slower than
    theirs. So when no faulty machine was found, a stage imbalance's location holds S_w's hottest
    worker, that worker's S_w excess is at least ``ROW_OUTLIER_RATIO`` times its stage peers'
    median excess and its fast-op factor (``fast_op_factors``, its stage peers as reference) at
    least ``FAST_OUTLIER_STEP``, the outlier-worker finding judges it with all its tests (own
    compute slow in every step above the floor, speed factor out of the others', ``MIN_SHARE`` of
    the slowdown from its compute). Real recordings: a 10 ms slow rank on the example's last stage
    (its standing load found first) has S_w excess 0.24 against its peers' 0.03-0.04 and fast ops
    1.67x theirs (``heldout9`` ``slow-rank-last-3x2``); a healthy 2x4 job's hottest last-stage
    worker, excess 0.19 against its peer's 0.08, has fast ops 0.46x its peer's."""
    if stats.dp < 2 or stats.n_steps < 2 or any(m.id == CauseId.FAULTY_MACHINE for m in matches):
        return None
    m = worker_matrix(report, "exact")  # (pp, dp)
    p, d = (int(x) for x in np.unravel_index(int(np.argmax(m)), m.shape))
    rank = int(stats.rank_of[d, p])
    rows = [c for c in matches if c.id == CauseId.STAGE_IMBALANCE and rank in c.location.ranks]
    if not rows:
        return None
    own = float(m[p, d]) - 1.0
    peers = float(median(np.delete(m[p], d))) - 1.0
    if own <= 0 or own < ROW_OUTLIER_RATIO * max(peers, 0.0):
        return None
    fast = float(np.exp(fast_op_factors(stats, np.ones(stats.n_steps, dtype=bool), [(d, p)])[d, p]))
    if not fast >= FAST_OUTLIER_STEP:
        return None
    return outlier_worker(report, stats)
