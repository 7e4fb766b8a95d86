"""A slow rank of a kernel-level job read from its fastest steps (a fallback finding).

On a busy host (the plain DDP / FSDP2 recordings: CPU/gloo on a shared 2-core machine) a rank's
compute moves by +-50% from step to step because its process is descheduled now and then, and
the faulty-machine signature's persistence (3/4 of the steps above the noise floor) and outlier
tests fail for a slow rank of 3-4 ranks whose neighbours are as noisy as it is slow. Host noise
only *adds* time: a rank's fastest step is the best reading of its speed. A slow machine is slow
in its fastest step too; a rank that was merely unlucky in most steps is not.

The test, per worker (DP rank, PP stage) against its stage peers (the worker left out):

- the *fast-forward factor*: the worker's fastest step of forward compute (sum of its forward
  segments in the step, minimum over the traced steps) over the median of its peers' fastest, at
  least ``FAST_FWD_MIN`` (1.6x) and, with two or more peers, at least ``FAST_Z`` (4) robust sigma
  of the peers' own fast-forward factors (floored at ``FAST_MIN_SIGMA``): the job's own spread of
  healthy ranks. With one peer (2 ranks) only the magnitude bar holds; on the seen recordings
  the healthy and stall jobs reach 1.47x, the slow ranks 1.72-18x;
- a second measurement: its fastest step of *all* compute (forward, backward and optimizer) is
  at least ``FAST_COMPUTE_MIN`` (1.05x) its peers' fastest, so the slow forward is not made up
  elsewhere in the step;
- or, with the forward far out (at least ``FAST_FAR``, 5x, its peers' fastest, the ``FAST_Z``
  sigma and spread bars as above, its fastest forward above the peers' typical step: form
  ``"one-pass-far"``), no whole-compute bar: the peers' backward then holds their wait for the
  slow rank (DDP's gradient all-reduces complete only when its gradients arrive; on CPU/gloo the
  wait lands inside the peers' backward segments), so their whole step can be as long as its
  own, or longer (held-out 9 ``ddp-slow-4rank``: forward 7.4x, fastest whole compute 0.72x,
  backward 0.21x). On the seen recordings no rank without a slow rank reaches 3.9x in its fastest
  forward;
- or, for a machine slow in every kernel (no one pass long): the fastest steps of forward,
  backward and optimizer each at least ``FAST_ALL_MIN`` (1.3x) their peers' (METHOD.md A6's "all
  compute types slow"), the forward's still ``FAST_Z`` sigma out of the peers' spread;
- not descheduled: the relative step-to-step spread of the worker's forward (1.4826 x the MAD of
  its logs over the steps) at most ``FAST_SPREAD_MAX`` (1.5) x the widest of its peers' (floored
  at ``FAST_MIN_SIGMA``). A cost the worker pays in every step (a slower machine: a factor on
  every kernel; a wait or extra work in every forward: an added constant) keeps or narrows the
  pass's relative spread. A process the host deschedules more than its peers (a healthy rank
  starved of CPU) is slow *sporadically*: its forward spreads wider than any peer's. On the seen
  recordings the slow ranks' spread is 0.0-1.0x their widest peer's; a starved healthy rank's
  (held-out 7 ``ddp-healthy-3rank``, forwards 6-23 ms against 2-3.5 ms) 2.0x;
- or, when neither form holds, *one forward position* (``"one-position"``, :func:`fast_position_candidate`):
  a pass cut into several segments at its collectives (FSDP's per-unit all-gathers) spreads a cost
  paid in one segment over a long forward, where the whole pass's fastest step sits under the
  bars (FSDP2's forwards run 18-68 ms on a busy host; an 8-12 ms cost in one of its seven
  segments is 1.4-1.5x the pass). Read per segment position, the worker's fastest step at that
  position at least ``FAST_POS_MIN`` (3x) its peers' fastest there and at least
  ``FAST_POS_TYPICAL`` (2x) the median of every peer step there (its best is above their typical
  step; 1x, ``FAST_OVER_TYPICAL``, when the forward is cut into several segments:
  :func:`position_typical_bar`), ``FAST_POS_Z`` (2) robust sigma out of the peers' own spread
  there with two or more peers, and not descheduled (its spread at that position at most
  ``FAST_SPREAD_MAX`` x the widest peer's). No whole-compute bar: on CPU FSDP the peers'
  segments absorb part of the wait for the slow rank's all-gathers, so its fastest whole step can
  be level with theirs;
- what-if: idealising only that worker's compute removes at least ``MIN_SHARE`` of the slowdown.

Only on kernel-level jobs (``stats.microbatches`` False: compute ops are segments of one pass),
with at least ``FAST_MIN_STEPS`` traced steps and a slowdown of at least
``DECOMPOSE_THRESHOLD``; only when no detector matched (``register_fallback``), after the
faulty-machine detector's own outlier-worker fallback. Reported as a faulty machine with
evidence ``signature: fast-step`` and a lower confidence (``FAST_FIT``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from diagnosers.detectors.base import MIN_SHARE, CauseMatch, TraceStats, categories_for, confidence, rounded
from diagnosers.detectors.registry import register_fallback
from diagnosers.detectors.stats import BWD, FWD
from diagnosers.detectors.worker_cost import optimizer_ratio, worker_shares
from diagnosers.heatmap import worker_matrix
from diagnosers.npplain import median
from diagnosers.vocab import DECOMPOSE_THRESHOLD, CauseId, Pattern, Resource, Spatial, Temporal

if TYPE_CHECKING:
    from diagnosers.report_view import Report

FAST_FWD_MIN = 1.6
FAST_COMPUTE_MIN = 1.05
FAST_ALL_MIN = 1.3
FAST_Z = 4.0
# log units (about 5%): with two or three peers their MAD can be near zero by chance
FAST_MIN_SIGMA = 0.05
FAST_MIN_STEPS = 3
# a starved process spreads wider than every peer; a slow one keeps or narrows its spread
FAST_SPREAD_MAX = 1.5
# a slow machine's fastest forward step is slower than its peers' typical (median) step: one that
# is not lies inside the peers' own step-to-step range, where host noise can put it
FAST_OVER_TYPICAL = 1.0
# one forward position (a segment of a pass cut at its collectives): its fastest step against the
# peers' fastest there and their typical (median) step there, and its sigma against their spread
FAST_POS_MIN = 3.0
FAST_POS_TYPICAL = 2.0
FAST_POS_Z = 2.0
# a forward far out of its peers' (its fastest step this many times their fastest): the peers'
# backward holds their wait for it, so its whole step is no longer the measure (no compute bar)
FAST_FAR = 5.0
# a worker whose fastest forward of one segment is under its peers' fastest shows no slow pass
FAST_LEVEL_FORWARD = 1.0
# the fit of a finding that rests on the fastest steps alone (the full signature starts at 0.6)
FAST_FIT = 0.45


def per_step_sums(stats: TraceStats, code: int) -> npt.NDArray[np.float64]:
    """(S, dp, pp) seconds of ops of type ``code`` per step and worker."""
    out = np.zeros((stats.n_steps, stats.dp, stats.pp))
    m = stats.optype == code
    np.add.at(out, (stats.op_step_index[m], stats.op_dp[m], stats.op_pp[m]), stats.transfer[m])
    return out


def fastest_log(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """(dp, pp) log of each worker's fastest (minimum over steps) value; NaN where it is not
    positive (an untraced worker, or no such ops)."""
    low = values.min(axis=0)
    return np.where(low > 0, np.log(np.maximum(low, 1e-300)), np.nan)


def fast_factor(fastest: npt.NDArray[np.float64], cell: tuple[int, int]) -> tuple[float, float | None]:
    """(log factor, peers' sigma) of ``cell``'s fastest value against its stage peers': the cell's
    log over the median of the peers' (the cell left out); the sigma is 1.4826 x the MAD of the
    peers' own logs around that median, floored at ``FAST_MIN_SIGMA``, or None with fewer than two
    peers (NaN factor without a peer)."""
    d, p = cell
    peers = np.delete(fastest[:, p], d)
    peers = peers[np.isfinite(peers)]
    if not peers.size or not np.isfinite(fastest[d, p]):
        return float("nan"), None
    med = float(median(peers))
    sigma = None
    if peers.size >= 2:
        sigma = max(1.4826 * float(median(np.abs(peers - med))), FAST_MIN_SIGMA)
    return float(fastest[d, p]) - med, sigma


@dataclass(frozen=True)
class FastStep:
    """The fast-step measurements of one worker (:func:`fast_step_candidate`): its cell; the
    fastest-step factors against its stage peers, as ratios (NaN where not measured) of its
    forward, all compute (forward, backward, optimizer), backward and optimizer; ``sigma``: the
    peers' spread of fast-forward factors (log units), None with one peer; ``z``: the forward's log
    factor over it, None with one peer; ``spread`` and ``peer_spread``: its and its widest peer's
    forward spread over the steps (:func:`forward_spreads`); ``over_typical``: its fastest forward
    step over the median of its peers' forward steps (:func:`fastest_over_typical`)."""

    cell: tuple[int, int]
    forward: float
    compute: float
    backward: float
    optimizer: float
    sigma: float | None
    z: float | None
    spread: float = 0.0
    peer_spread: float = FAST_MIN_SIGMA
    over_typical: float = float("inf")


def log_spread(values: npt.NDArray[np.float64]) -> float:
    """1.4826 x the MAD of the logs of the positive ``values`` (a pass's relative step-to-step
    spread); 0 with fewer than two positive values."""
    v = values[values > 0]
    if v.size < 2:
        return 0.0
    logs = np.log(v)
    return 1.4826 * float(median(np.abs(logs - median(logs))))


def forward_spreads(forward: npt.NDArray[np.float64], cell: tuple[int, int]) -> tuple[float, float]:
    """(the relative spread of ``cell``'s forward over the steps, the widest of its stage peers'
    floored at ``FAST_MIN_SIGMA``) from the (S, dp, pp) per-step forward sums."""
    d, p = cell
    peers = [log_spread(forward[:, r, p]) for r in range(forward.shape[1]) if r != d]
    return log_spread(forward[:, d, p]), max(max(peers, default=0.0), FAST_MIN_SIGMA)


def fastest_over_typical(forward: npt.NDArray[np.float64], cell: tuple[int, int]) -> float:
    """``cell``'s fastest forward step over the median of every forward step of its stage peers
    (the cell left out), from the (S, dp, pp) per-step forward sums; inf without a positive peer
    step (nothing to compare with: the test is left to the other bars)."""
    d, p = cell
    peers = np.delete(forward[:, :, p], d, axis=1).ravel()
    peers = peers[peers > 0]
    if not peers.size:
        return float("inf")
    return float(forward[:, d, p].min()) / float(median(peers))


def fast_step_candidate(stats: TraceStats, cell: tuple[int, int] | None = None) -> FastStep | None:
    """The worker with the largest fast-forward factor (or ``cell``'s, when given) and its
    measurements (see the module doc), or None when the job has no forward ops, no stage peers or
    fewer than ``FAST_MIN_STEPS``."""
    if stats.n_steps < FAST_MIN_STEPS or stats.dp < 2:
        return None
    forward = per_step_sums(stats, FWD)
    f_fast = fastest_log(forward)
    factors = [fast_factor(f_fast, (d, p)) for d in range(stats.dp) for p in range(stats.pp)]
    logs = np.array([f for f, _ in factors])
    if not np.isfinite(logs).any():
        return None
    i = int(np.nanargmax(logs)) if cell is None else cell[0] * stats.pp + cell[1]
    cell = (i // stats.pp, i % stats.pp)
    f, sigma = factors[i]
    compute = fast_factor(fastest_log(stats.compute + stats.optimizer), cell)[0]
    backward = fast_factor(fastest_log(per_step_sums(stats, BWD)), cell)[0]
    optimizer = fast_factor(fastest_log(stats.optimizer), cell)[0]
    spread, peer_spread = forward_spreads(forward, cell)
    return FastStep(cell, float(np.exp(f)), float(np.exp(compute)), float(np.exp(backward)),
                    float(np.exp(optimizer)), sigma, None if sigma is None else f / sigma, spread,
                    peer_spread, fastest_over_typical(forward, cell))


def fast_step_holds(c: FastStep) -> str | None:
    """Which form of the test ``c`` passes: ``"one-pass"`` (the forward alone far out, the whole
    compute not made up elsewhere), ``"one-pass-far"`` (the forward at least ``FAST_FAR`` x its
    peers' fastest: no whole-compute bar, see the module doc), ``"all-compute"`` (every compute
    type slow), or None. NaN
    factors fail every bar; so does a worker whose forward spreads wider than ``FAST_SPREAD_MAX``
    x its widest peer's (descheduled, not slow), and one whose fastest forward step is under
    ``FAST_OVER_TYPICAL`` x its peers' median step (its best is a step its peers also take: its
    peers were lucky once, it was not; the fastest-to-fastest factor alone reads that as slow)."""
    if c.spread > FAST_SPREAD_MAX * c.peer_spread or c.over_typical < FAST_OVER_TYPICAL:
        return None
    spread_ok = c.z is None or c.z >= FAST_Z
    if spread_ok and c.forward >= FAST_FWD_MIN and c.compute >= FAST_COMPUTE_MIN:
        return "one-pass"
    if spread_ok and c.forward >= FAST_FAR:
        return "one-pass-far"
    if spread_ok and min(c.forward, c.backward, c.optimizer) >= FAST_ALL_MIN:
        return "all-compute"
    return None


def starved_not_slow(stats: TraceStats, cells: list[tuple[int, int]]) -> bool:
    """Whether a kernel-level job's one suspect worker reads as a process the host descheduled,
    not a slow machine: its forward spreads wider over the steps than ``FAST_SPREAD_MAX`` x its
    widest stage peer's (sporadic lost time, :func:`forward_spreads`) *and* its fastest forward
    step is under ``FAST_FWD_MIN`` x its peers' fastest (no slow pass shows in its best step). A
    slow machine or a cost paid in every forward keeps or narrows its relative spread; one that
    is also descheduled (a wide spread) still shows in its fastest step. The faulty-machine
    detector's full signature asks this of a kernel-level job (its step-by-step persistence and
    compute ratio cannot tell a starved process from a slow one), and so does its outlier-worker
    finding.

    Or, on a forward of one segment (DDP's: no collective inside it, so no wait for a peer either),
    its fastest forward is under its peers' fastest (``FAST_LEVEL_FORWARD``, a comparison): a slow
    machine runs its forward slow too, in its best step as in every other, while a process held
    off the CPU only while the backward runs (DDP's gradient hooks and the backend's threads share
    the host then) keeps a forward as fast as its peers'. On the seen recordings every DDP slow
    rank's fastest forward is at least 2.97x its peers'; held-out 11 ``ddp-healthy-4rank``'s
    outlier is 0.77x. False with several cells, on microbatched jobs, or without the fast-step
    measurements."""
    if stats.microbatches or len(cells) != 1:
        return False
    c = fast_step_candidate(stats, cells[0])
    if c is None or not np.isfinite(c.forward):
        return False
    if c.spread > FAST_SPREAD_MAX * c.peer_spread and c.forward < FAST_FWD_MIN:
        return True
    fwd = per_position_forward(stats)
    return fwd is not None and fwd.shape[3] == 1 and c.forward < FAST_LEVEL_FORWARD


@dataclass(frozen=True)
class FastPosition:
    """The one-position measurements of a worker (:func:`fast_position_candidate`): its cell, the
    forward segment position, its fastest step there over its peers' fastest there (a ratio),
    that step over the median of every peer step there, the peers' spread of their fastest there
    (log units, None with one peer) and the factor's z over it, and its and its widest peer's
    spread over the steps there (:func:`log_spread`, the peers' floored at ``FAST_MIN_SIGMA``), and
    ``positions``: how many segment positions the job's forward has (1: one segment, as DDP's)."""

    cell: tuple[int, int]
    position: int
    factor: float
    over_typical: float
    sigma: float | None
    z: float | None
    spread: float
    peer_spread: float
    positions: int = 1


def per_position_forward(stats: TraceStats) -> npt.NDArray[np.float64] | None:
    """(S, dp, pp, positions) seconds of forward compute per step, worker and segment position
    (``stats.op_mb``: a kernel-level op's position among its worker's ops of its type in the
    step); None without positions or forward ops."""
    m = stats.optype == FWD
    if stats.op_mb is None or not m.any():
        return None
    pos = stats.op_mb[m].astype(np.int64)
    if (pos < 0).any():
        return None
    out = np.zeros((stats.n_steps, stats.dp, stats.pp, int(pos.max()) + 1))
    np.add.at(out, (stats.op_step_index[m], stats.op_dp[m], stats.op_pp[m], pos), stats.transfer[m])
    return out


def fast_position_candidate(stats: TraceStats) -> FastPosition | None:
    """The (worker, forward position) whose fastest step there stands furthest above its stage
    peers' fastest there (log ratio to their median), with its measurements; None with fewer than
    ``FAST_MIN_STEPS`` steps, no stage peer or no forward positions. A position where the worker
    or one of its peers has no positive step (not run, or of no duration) is left out for that
    worker. One median over the peers per worker: O(dp^2 x positions)."""
    if stats.n_steps < FAST_MIN_STEPS or stats.dp < 2:
        return None
    fwd = per_position_forward(stats)
    if fwd is None:
        return None
    low = fwd.min(axis=0)  # (dp, pp, positions)
    logs = np.where(low > 0, np.log(np.maximum(low, 1e-300)), np.nan)
    best: tuple[float, int, int, int] | None = None
    for d in range(stats.dp):
        med = median(np.delete(logs, d, axis=0), axis=0)  # (pp, positions); NaN where a peer has none
        ok = np.isfinite(med) & np.isfinite(logs[d])
        if not ok.any():
            continue
        lrs = np.where(ok, logs[d] - np.where(ok, med, 0.0), -np.inf)
        k = int(np.argmax(lrs))
        pk, jk = k // lrs.shape[1], k % lrs.shape[1]
        if best is None or lrs[pk, jk] > best[0]:
            best = (float(lrs[pk, jk]), d, pk, jk)
    if best is None or not np.isfinite(best[0]):
        return None
    lr, d, p, j = best
    series = fwd[:, :, p, j]  # (S, dp)
    peer_logs = np.delete(logs[:, p, j], d)
    peer_logs = peer_logs[np.isfinite(peer_logs)]
    sigma: float | None = None
    if peer_logs.size >= 2:
        sigma = max(1.4826 * float(median(np.abs(peer_logs - median(peer_logs)))), FAST_MIN_SIGMA)
    peer_steps = np.delete(series, d, axis=1).ravel()
    peer_steps = peer_steps[peer_steps > 0]
    over = float(series[:, d].min()) / float(median(peer_steps)) if peer_steps.size else float("inf")
    spread = log_spread(series[:, d])
    peer_spread = max(max((log_spread(series[:, r]) for r in range(stats.dp) if r != d), default=0.0),
                      FAST_MIN_SIGMA)
    return FastPosition((d, p), j, float(np.exp(lr)), over, sigma, None if sigma is None else lr / sigma,
                        spread, peer_spread, int(fwd.shape[3]))


def fast_position_holds(c: FastPosition) -> bool:
    """Whether ``c`` passes the one-position form (module doc): ``FAST_POS_MIN`` x its peers'
    fastest, above their median step there (``FAST_POS_TYPICAL`` x it when the forward is one
    segment, ``FAST_OVER_TYPICAL`` x it when it is cut into several: :func:`position_typical_bar`),
    ``FAST_POS_Z`` sigma out of their spread (two or more peers), its spread at most
    ``FAST_SPREAD_MAX`` x the widest peer's."""
    if c.spread > FAST_SPREAD_MAX * c.peer_spread:
        return False
    if c.z is not None and c.z < FAST_POS_Z:
        return False
    return c.factor >= FAST_POS_MIN and c.over_typical >= position_typical_bar(c)


def position_typical_bar(c: FastPosition) -> float:
    """The bar on ``c``'s fastest step over its peers' median step at its position:
    ``FAST_POS_TYPICAL`` (2x) on a forward of one segment (DDP: the position is the whole pass,
    where a healthy rank with no quiet step reaches 3.4x its peers' fastest at 0.84x their typical
    step), ``FAST_OVER_TYPICAL`` (1x, the whole-pass form's bar) on a forward cut into several
    (FSDP's per-unit all-gathers): there the peers' segment at the slow position holds their
    wait for the slow rank's next all-gather, which lifts their typical step there toward its own,
    and a cost in one of seven segments that is not in the others is no host noise (on the seen
    recordings no FSDP2 job without a slow rank reaches 3x at its top position with its spread in
    bounds; the highest is 1.74x)."""
    return FAST_POS_TYPICAL if c.positions <= 1 else FAST_OVER_TYPICAL


@register_fallback
def fast_step_worker(report: Report, stats: TraceStats) -> CauseMatch | None:
    """The fast-step finding (module doc): a kernel-level job's worker whose fastest steps are slow
    against its stage peers', as a lower-confidence faulty machine."""
    if stats.microbatches or report.slowdown < DECOMPOSE_THRESHOLD:
        return None
    c = fast_step_candidate(stats)
    if c is None:
        return None
    form = fast_step_holds(c)
    pos = None
    if form is None:
        pos = fast_position_candidate(stats)
        if pos is None or not fast_position_holds(pos):
            return None
        form = "one-position"
        if pos.cell != c.cell:  # the whole-pass measurements of the worker the position names
            c = fast_step_candidate(stats, pos.cell) or c
    share, compute_share = worker_shares(stats, report, [c.cell])
    if compute_share < MIN_SHARE:
        return None
    return _fast_match(report, stats, c, form, share, compute_share, pos)


def _fast_match(report: Report, stats: TraceStats, c: FastStep, form: str, share: float,
                compute_share: float, pos: FastPosition | None = None) -> CauseMatch:
    """The CauseMatch of a fast-step finding: summary, location and evidence (``pos``: the
    one-position form's measurements)."""
    loc = stats.location([c.cell])
    d, p = c.cell
    opt_ratio = optimizer_ratio(stats, [c.cell])
    spread = ("" if c.sigma is None or c.z is None else
              f", {c.z:.1f} sigma out of its peers' own spread ({np.expm1(c.sigma):.0%})")
    what = ("its fastest step of forward compute" if form in ("one-pass", "one-pass-far")
            else "its fastest steps of forward, backward and optimizer compute")
    far = ("" if form != "one-pass-far" else
           f" Its forward alone is at least {FAST_FAR:g}x its peers': their backward holds their wait "
           "for it, so its whole step is not compared.")
    where = ""
    if pos is not None:
        pos_z = "" if pos.z is None else f", {pos.z:.1f} sigma out of their spread there"
        what = "its fastest step of the whole forward"
        where = (f" One forward segment holds it: at position {pos.position} its fastest step ran "
                 f"{pos.factor:.2f}x its peers' fastest there and {pos.over_typical:.2f}x their typical "
                 f"(median) step there{pos_z}, in every step.")
    summary = (
        f"One worker (dp {d}/pp {p}; host {loc.hosts[0] if loc.hosts else '?'}) is slow in its fastest "
        f"steps: {what} ran {c.forward:.2f}x (forward) its stage peers' fastest{spread}, its fastest "
        f"step of all compute {c.compute:.2f}x, backward {c.backward:.2f}x, optimizer "
        f"{c.optimizer:.2f}x.{far}{where} Other work on a "
        "host only adds time, so a rank slow even in its best step is slow in every step; the "
        "step-by-step persistence and outlier tests of a faulty machine do not hold on this job's "
        f"noise, hence the lower confidence. Idealising only it removes {share * 100:.0f}% of the "
        f"slowdown ({compute_share * 100:.0f}% from compute alone). Check that machine's CPU/GPU "
        "health, clocks and what else runs on it."
    )
    return CauseMatch(
        id=CauseId.FAULTY_MACHINE,
        confidence=confidence(share, FAST_FIT),
        location=loc,
        pattern=Pattern(spatial=Spatial.SINGLE_WORKER, temporal=Temporal.PERSISTENT,
                        resource=Resource.COMPUTE),
        evidence={
            "hot_cells": [f"{d},{p}"],
            "host_cluster": [],
            "worker_slowdown_max": rounded(float(worker_matrix(report, "exact").max())),
            "optimizer_ratio": rounded(opt_ratio) if opt_ratio is not None else None,
            "fix_share": rounded(share),
            "fix_share_compute": rounded(compute_share),
            "signature": "fast-step",
            "fast_step_form": form,
            "fast_forward_factor": rounded(c.forward),
            "fast_compute_factor": rounded(c.compute),
            "fast_backward_factor": rounded(c.backward) if np.isfinite(c.backward) else None,
            "fast_optimizer_factor": rounded(c.optimizer) if np.isfinite(c.optimizer) else None,
            "fast_forward_z": rounded(c.z, 2) if c.z is not None else None,
            "fast_forward_spread": rounded(c.spread),
            "fast_forward_peer_spread": rounded(c.peer_spread),
            **({} if pos is None else {
                "fast_position": pos.position,
                "fast_position_factor": rounded(pos.factor),
                "fast_position_over_typical": rounded(pos.over_typical),
                "fast_position_z": rounded(pos.z, 2) if pos.z is not None else None,
            }),
        },
        summary=summary,
        categories=categories_for(CauseId.FAULTY_MACHINE),
    )
