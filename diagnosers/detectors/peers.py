"""Peer comparisons shared by the detectors: one leave-out reference, the job's noise floor, and a
change-point test.

Every "is this worker slow?" question compares the worker with its *peers*: the other DP ranks of
its PP stage (they run the same layers on other data), leaving out the worker itself and any other
candidate. With DP = 2 a reference that kept the candidate would be half made of it.

The noise floor is the job's own spread of those ratios: real recordings on a busy host show
identical ranks differing by ±50% from step to step, synthetic jobs by 1%. A worker is slow when it
stands out of *that* spread, not out of a fixed percentage.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from diagnosers.npplain import median

Arr = npt.NDArray[np.float64]
# MAD -> standard deviation for a normal distribution.
MAD_SIGMA = 1.4826
# Below this the spread is set by timers and clocks, not by the machines.
MIN_SIGMA = 0.005
# The healthy machines' own spread of speeds (``NoiseFloor.fleet_sigma``) is read from at least
# this many workers' typical ratios, and only where it stands this many times above what step
# noise alone gives them (widened heldout step-noise-faulty-3: 4 steps of +-21% step noise gave
# the typical ratios a 0.17 spread, 1.3x the step noise's 0.13, and a 2.3x machine fell under
# the fleet bar; set 3 healthy-noisy-8: 0.0077, 2.0x the step noise's 0.0039).
FLEET_MIN_WORKERS = 8
FLEET_CLEAR = 1.5
# The pooled MAD of normal draws around each row's own median over n draws, as a share of their
# sigma (simulated, 20 000 rows each); about 1 - 1.25 / n from 6 draws on (0.84 at 8, 0.92 at 16).
MEDIAN_MAD_DEFLATION = {3: 0.467, 4: 0.724, 5: 0.732}


def median_mad_deflation(n_steps: int) -> float:
    """The share of the per-step sigma that a MAD around each worker's own median over ``n_steps``
    steps reads (``MEDIAN_MAD_DEFLATION``; 1 with fewer than three steps)."""
    if n_steps < 3:
        return 1.0
    return MEDIAN_MAD_DEFLATION.get(n_steps, 1.0 - 1.25 / n_steps)
# An uneven partition explains a heavy stage when its compute per layer is within 15% of the
# other stages' (a faulty host's stage is slow per layer too).
PARTITION_TOLERANCE = 0.15


def _inside(dp: int, pp: int, cells: Iterable[tuple[int, int]]) -> npt.NDArray[np.bool_]:
    m = np.zeros((dp, pp), dtype=bool)
    for d, p in cells:
        m[d, p] = True
    return m


def peer_reference(values: Arr, cells: Iterable[tuple[int, int]]) -> Arr:
    """(S, pp) reference per step and stage: the median of ``values`` (S, dp, pp) over that stage's
    workers outside ``cells``; over every worker outside ``cells`` when the whole stage is in it
    (and over everyone when nothing is left)."""
    n_s, dp, pp = values.shape
    inside = _inside(dp, pp, cells)
    out = np.empty((n_s, pp))
    everyone_else = values[:, ~inside] if (~inside).any() else values.reshape(n_s, -1)
    fallback = median(everyone_else, axis=1)
    for p in range(pp):
        peers = ~inside[:, p]
        out[:, p] = median(values[:, peers, p], axis=1) if peers.any() else fallback
    return out


def peer_ratio(values: Arr, cell: tuple[int, int], leave_out: Iterable[tuple[int, int]] = ()) -> Arr:
    """(S,) the cell's value over its peers' median per step, leaving out the cell itself and the
    ``leave_out`` cells (``peer_reference``)."""
    d, p = cell
    ref = peer_reference(values, [cell, *leave_out])[:, p]
    return np.divide(values[:, d, p], ref, out=np.ones(values.shape[0]), where=ref > 0)


def log_ratios(values: Arr, exclude: Iterable[tuple[int, int]] = ()) -> Arr:
    """(S, dp, pp) log of every cell's value over the median of its own stage's *other* DP ranks,
    leaving the ``exclude`` cells out of every reference (NaN where a cell has no such peer, and
    for the excluded cells themselves)."""
    _, dp, pp = values.shape
    out = np.full_like(values, np.nan)
    inside = _inside(dp, pp, exclude)
    for p in range(pp):
        cols = np.flatnonzero(~inside[:, p])
        if len(cols) < 2:
            continue  # no worker of the stage has a peer left
        own = values[:, cols, p]
        ref = median_of_others(own)
        out[:, cols, p] = np.log(np.maximum(own, 1e-12) / np.maximum(ref, 1e-12))
    return out


def median_of_others(v: Arr) -> Arr:
    """(S, m) for ``v`` (S, m), m >= 2: entry (s, j) is the median of row s without column j, as
    ``np.median`` gives it. Each row is sorted once; leaving out the value of rank k shifts the
    ranks above k down by one, so the middle one or two values are read from the sorted row."""
    m = v.shape[1]
    if not np.isfinite(v).all():  # NaN orders differently in a sort: the plain medians
        return np.stack([median(np.delete(v, j, axis=1), axis=1) for j in range(m)], axis=1)
    order = np.argsort(v, axis=1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(m)[None, :], axis=1)
    srt = np.take_along_axis(v, order, axis=1)
    n = m - 1  # values left

    def left(i: int) -> Arr:  # the i-th smallest value once the value of rank ``rank`` is left out
        return np.take_along_axis(srt, i + (rank <= i), axis=1)

    if n % 2:
        return left(n // 2)
    return (left(n // 2 - 1) + left(n // 2)) / 2


@dataclass
class NoiseFloor:
    """The job's spread of worker-vs-peer ratios (in log units, ~relative).

    ``step`` is the step-to-step spread of a worker around its own typical ratio (how much one step
    can move by chance); ``worker`` the spread of the workers' typical ratios (how different
    healthy machines are). Both robust (MAD) and floored at ``MIN_SIGMA``."""

    step: float
    worker: float
    n_steps: int
    n_workers: int
    # The step spread of the optimizer's ratios (None when the trace has no optimizer ops): a
    # second, independent look at a worker's speed (a slow machine slows its optimizer too).
    optimizer: float | None = None
    # The correlation (>= 0) of compute's and the optimizer's step-to-step deviations: how far the
    # optimizer is an *independent* second measurement (0) or the same noise again (1).
    joint_rho: float = 0.0
    # Whether ``step`` was read through successive-step differences (``successive_step_spread``),
    # which carry no few-steps bias, rather than as a MAD around each worker's own median.
    step_unbiased: bool = False
    # The workers' persistent spread read from two disjoint halves of the steps (even and odd):
    # sqrt of the covariance, over workers, of their mean ratios in each half (``split_half_spread``);
    # None where it was not read. Step noise is independent between the halves, so it adds
    # nothing to the covariance; a machine's persistent speed shows in both.
    split: float | None = None

    def typical_sigma(self) -> float:
        """Spread of one worker's typical ratio from step noise alone (median of n steps)."""
        return self.step * 1.25 / np.sqrt(max(self.n_steps, 1))

    def fleet_sigma(self) -> float:
        """The healthy machines' own persistent spread: the workers' typical-ratio spread less what
        step noise alone gives it (in quadrature, the step spread read without the few-steps bias
        of its MAD, ``median_mad_deflation``). 0 where the spread is at its floor (nothing
        measured), where fewer than ``FLEET_MIN_WORKERS`` workers measured it (the MAD of two to
        seven values is no spread), or where it does not stand ``FLEET_CLEAR`` times above what
        step noise gives it (a busy host's identical ranks, a few steps of heavy step noise: the
        rest is the MAD's own sampling error). Never above the split-half spread (``split``): with a
        few steps of heavy step noise the MADs of the typical ratios and of the steps can each be
        two of their own sigmas off, reading a persistent spread that the two halves of the
        steps do not share (set 7 faulty-weak-step-noise-6: dp 8 x pp 2, 5 steps of +-17%, a
        fleet spread of 0.15 read where the halves' covariance is 0, which hid a 1.58x machine)."""
        step_typical = self.step / median_mad_deflation(self.n_steps) * 1.25 / np.sqrt(max(self.n_steps, 1))
        measured = self.worker > MIN_SIGMA and self.n_workers >= FLEET_MIN_WORKERS
        if not measured or self.worker < FLEET_CLEAR * step_typical:
            return 0.0
        spread = float(np.sqrt(self.worker**2 - step_typical**2))
        return spread if self.split is None else min(spread, self.split)


def noise_floor(values: Arr, exclude: Iterable[tuple[int, int]] = ()) -> NoiseFloor:
    """The noise floor of ``values`` (S, dp, pp) (per-step compute), leaving ``exclude`` out of the
    estimate (the candidates: a slow worker is not part of the noise)."""
    n_s, dp, pp = values.shape
    # The candidates are left out of the references too: with DP 2 a slow worker's peer, compared
    # with the slow worker, would carry the slow worker's own steps into the noise.
    r = log_ratios(values, exclude)
    keep = np.isfinite(r).all(axis=0)
    if dp < 2:
        return NoiseFloor(successive_step_spread(values), MIN_SIGMA, n_s, pp, step_unbiased=True)
    if not keep.any():
        return NoiseFloor(MIN_SIGMA, MIN_SIGMA, n_s, dp * pp)
    typical = median(np.where(np.isfinite(r), r, 0.0), axis=0)  # (dp, pp)
    dev = (r - typical[None])[:, keep]
    step = MAD_SIGMA * float(median(np.abs(dev))) if n_s >= 2 else MIN_SIGMA
    tv = typical[keep]
    worker = MAD_SIGMA * float(median(np.abs(tv - median(tv))))
    return NoiseFloor(max(step, MIN_SIGMA), max(worker, MIN_SIGMA), n_s, int(keep.sum()),
                      split=split_half_spread(r[:, keep]))


def split_half_spread(r: Arr) -> float | None:
    """The workers' persistent spread in log ratios ``r`` (S, w): sqrt of the covariance, across
    the w workers, of each worker's mean over the even steps and over the odd steps (0 when
    negative); None with fewer than two steps or three workers. Unbiased by step noise, which
    the two halves do not share."""
    n_s, w = r.shape
    if n_s < 2 or w < 3:
        return None
    a, b = r[0::2].mean(axis=0), r[1::2].mean(axis=0)
    cov = float(np.mean((a - a.mean()) * (b - b.mean())))
    return float(np.sqrt(max(cov, 0.0)))


def successive_step_spread(values: Arr) -> float:
    """The step noise of ``values`` (S, dp, pp) read without DP peers (the floor of a job of one DP
    rank, whose stages are compared with each other): every worker's log ratio to its stage's
    other DP ranks (with one DP rank, each stage's to the other stages' median), through the
    differences of successive steps (MAD, over sqrt 2), floored at ``MIN_SIGMA``; ``MIN_SIGMA``
    with fewer than three steps or one worker.

    Every worker stays in: a persistently slow one's ratio does not move from step to step and an
    onset moves it once, which the median of the differences passes over; a healthy stage's ratio
    moves by the job's own step noise (tune5 healthy-noisy-5: one DP rank, 8 stages, op sigma 7%,
    a 2% "onset" on the 0.5% floor the job had without it)."""
    n_s, dp, pp = values.shape
    if n_s < 3 or dp * pp < 2:
        return MIN_SIGMA
    if dp >= 2:
        r = log_ratios(values)
    else:
        v = np.maximum(values[:, 0, :], 1e-12)  # (S, pp)
        r = np.log(v / np.maximum(median_of_others(v), 1e-12))
    d = np.diff(r.reshape(n_s, -1), axis=0)
    d = np.abs(d[np.isfinite(d)])
    if not d.size:
        return MIN_SIGMA
    return max(MAD_SIGMA * float(median(d)) / np.sqrt(2.0), MIN_SIGMA)


@dataclass
class ChangePoint:
    """A step index where a series moves from its normal level to a higher one and stays there."""

    index: int  # first affected step index
    before: float  # mean of the series before
    after: float  # mean after
    z: float  # (after - before) over the noise of the two means


def change_point(series: Arr, sigma: float, min_after: int = 2, min_before: int = 1) -> ChangePoint | None:
    """The best single upward change point of ``series`` (log ratios per step), or None.

    Every split with at least ``min_before`` steps before and ``min_after`` after is tried; the one
    with the largest standardised jump wins. It must also be clean: every step after it above every
    step before it. ``sigma`` is the per-step noise (the job's noise floor)."""
    n = len(series)
    best: ChangePoint | None = None
    for k in range(min_before, n - min_after + 1):
        a, b = series[:k], series[k:]
        if b.min() <= a.max():
            continue
        se = sigma * np.sqrt(1.0 / len(a) + 1.0 / len(b))
        z = float((b.mean() - a.mean()) / max(se, 1e-12))
        if best is None or z > best.z:
            best = ChangePoint(k, float(a.mean()), float(b.mean()), z)
    return best


# Each type's standardised ratio is clipped here before the types are combined: one type's
# heavy-tailed spike (a descheduled optimizer step ten times its peers') cannot decide alone.
JOINT_CLIP = 3.0


def joint_series(ratios: list[Arr], sigmas: list[float], rho: float = 0.0) -> Arr:
    """(S,) several per-step log ratios of one worker (e.g. compute and optimizer) combined into
    one series of unit noise: each divided by its own noise floor and clipped at ``JOINT_CLIP``,
    summed, over the sum's standard deviation when the series' noise correlates at ``rho``
    (sqrt(k + k (k - 1) rho); Stouffer's combination for independent series, rho = 0)."""
    z = [np.clip(r / max(s, MIN_SIGMA), -JOINT_CLIP, JOINT_CLIP) for r, s in zip(ratios, sigmas, strict=True)]
    return np.asarray(np.sum(z, axis=0) / joint_scale(len(z), rho), dtype=np.float64)


def joint_scale(k: int, rho: float) -> float:
    """Standard deviation of a sum of ``k`` unit-noise series whose noise correlates at ``rho``."""
    k = max(k, 1)
    return float(np.sqrt(k + k * (k - 1) * min(max(rho, 0.0), 1.0)))


def noise_correlation(a: Arr, b: Arr, exclude: Iterable[tuple[int, int]] = ()) -> float:
    """The correlation (clipped at 0) of two (S, dp, pp) per-step measurements' deviations from
    each worker's own typical log ratio to its peers (``log_ratios``, ``exclude`` left out): 0 when
    their step-to-step noise is independent, 1 when it is the same noise (e.g. one per-worker-step
    factor slowing both). 0 with fewer than 4 values."""
    ex = list(exclude)
    ra, rb = log_ratios(a, ex), log_ratios(b, ex)
    ok = np.isfinite(ra) & np.isfinite(rb)
    if ok.sum() < 4:
        return 0.0
    cols = ok.all(axis=0)  # workers with peers in every step (the rest are all-NaN)
    if cols.sum() < 2:
        return 0.0
    da = (ra[:, cols] - median(ra[:, cols], axis=0, keepdims=True)).ravel()
    db = (rb[:, cols] - median(rb[:, cols], axis=0, keepdims=True)).ravel()
    if da.std() <= 0 or db.std() <= 0:
        return 0.0
    return max(0.0, float(np.corrcoef(da, db)[0, 1]))


def level_shift(
    u: Arr, min_before: int, min_after: int, z_jump: float, z_before: float, z_after: float
) -> ChangePoint | None:
    """An onset in a unit-noise series ``u`` (``joint_series``): the best clean change point
    (``change_point``) whose jump is at least ``z_jump`` standard errors, whose steps before sit at
    the healthy level (their mean within ``z_before`` standard errors of 0) and whose steps after
    stand at least ``z_after`` standard errors above it. Unlike a bare jump, this asks where the
    worker started: a persistently slow worker whose first steps happen to be a little faster is
    not at the healthy level before any split."""
    cp = change_point(u, 1.0, min_after=min_after, min_before=min_before)
    if cp is None or cp.z < z_jump:
        return None
    n_before, n_after = cp.index, len(u) - cp.index
    if cp.before * np.sqrt(n_before) > z_before or cp.after * np.sqrt(n_after) < z_after:
        return None
    return cp


def partition_explains(compute: Arr, layers: list[int] | None, rows: list[int]) -> bool:
    """Whether ``layers`` (per stage) explains the rows' extra compute (``compute`` is (S, dp, pp)):
    an uneven partition slows every DP rank of a stage in proportion to its layers, a faulty host
    does not follow the layer count. True when each row has more layers than the median stage and
    its compute per layer is at most ``PARTITION_TOLERANCE`` above the other stages' median (below
    it is no slow machine: the first and last stages carry the embedding and the head, so with few
    layers per stage their compute per layer runs a third over a middle stage's)."""
    pp = compute.shape[2]
    if layers is None or len(layers) != pp or min(layers) <= 0 or pp < 2 or not rows:
        return False
    lay = np.asarray(layers, dtype=np.float64)
    per_layer = compute.mean(axis=(0, 1)) / lay
    for r in rows:
        ref = float(median(np.delete(per_layer, r)))
        if ref <= 0 or lay[r] <= float(median(np.delete(lay, r))):
            return False
        if per_layer[r] / ref - 1.0 > PARTITION_TOLERANCE:
            return False
    return True
