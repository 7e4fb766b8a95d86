"""Transport and host noise on kernel-level jobs: transient collective stalls told apart from
persistently slow communication, transient compute bursts told apart from a slow rank, and the view
of the job the detectors judge when either is material.

On CPU/gloo (and busy hosts generally) a collective can stall for tens of milliseconds after every
member has arrived, on random collectives in random steps. The what-if method counts that as
communication slowdown; for the diagnosis it is the transport's noise, not a straggler, and it
can hide a compute-side cause of a smaller size. Other work on a shared host does the same to
compute: one rank's compute in one step runs 2-8x its own typical (the process descheduled),
which makes that rank the hottest worker of the job although another rank is slower in most steps.
Used by :mod:`diagnosers.diagnose` for traces that carry an explicit (kernel-level) graph.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from diagnosers.detectors import compute_stats
from diagnosers.detectors.base import TraceStats
from diagnosers.detectors.gc_pause import paused_forwards, simultaneous_freezes
from diagnosers.kernel_graph import node_label
from diagnosers.model import OPTYPE_CODE, OpTable, Trace
from diagnosers.report import WhatIfReport
from diagnosers.whatif import WhatIfEngine, analyze

if TYPE_CHECKING:
    from diagnosers.report_view import Report

# ----------------------------------------------------------------------------------------------
# transport noise: transient collective stalls, told apart from persistently slow communication

NOISE_MIN_STEPS = 3  # a collective's typical transfer and its persistence need this many steps
NOISE_PERSIST = 0.75  # a persistently slow collective is elevated in at least this share of steps
NOISE_FLOORS = 2.0  # elevated: above the pooled ideal by more than this many noise floors
NOISE_SHARE = 0.1  # transient stalls holding less of the slowdown than this leave every finding as it is
# a launch gap is an input stall only when it is this many robust standard deviations of the step
# time long; a recurring transfer excess is slowness only when it is this many standard errors of
# the mean step time
STALL_Z = 3.0
# ... or, judged against the time the simulation leaves unexplained, at least this share of the
# job's typical step (``quiet_launch_gaps``). On the seen recordings' noise views the gaps that only
# this reading keeps are 0.38x a typical step at most in a job without a stall (a 21 ms gap of a
# 4-rank slow-rank job) and 0.48x for the one stall it is needed for: a narrow margin, set between
GAP_STEP_SHARE = 0.4
# host noise: a (rank, step) compute burst stands this many robust sigma of the job's per-rank,
# per-step compute spread (log units) above that rank's own typical step, and is at least this
# share of it
BURST_Z = 3.0
BURST_REL = 0.5
MIN_LOG_SIGMA = 0.005
COMPUTE_CODES = (OPTYPE_CODE["forward-compute"], OPTYPE_CODE["backward-compute"], OPTYPE_CODE["optimizer"])


@dataclass
class TransportNoise:
    """The transient part of a kernel-level job's collective transfer times (see :func:`transport_noise`).

    ``t_orig`` / ``t_clean`` / ``t_ideal``: mean simulated step times (no launch delay) with the
    measured transfers, with the transient excess removed, and ideal; ``share``: the part of the
    slowdown ``(t_orig - t_clean) / (t_orig - t_ideal)`` the transient excess holds; ``floor``: the
    job's noise floor, the median over collectives (and DP ranks) of the spread of one collective's
    transfer times across steps (median absolute deviation over median); ``persistent``: the
    (node, DP rank) series elevated in most steps; ``persistent_s``: their typical transfer above
    the ideal, per step (kept); ``clipped`` / ``cells``: collective cells capped / all of them;
    ``worst``: (node, step id, extra seconds), the largest transient excesses first;
    ``share_added``: the part of the slowdown the transient excess costs when put back into the
    ideal run (every other op at its type's ideal), the method's other view (:func:`material`).
    """

    t_orig: float
    t_clean: float
    t_ideal: float
    share: float
    floor: float
    persistent: list[tuple[int, int]]
    persistent_s: float
    clipped: int
    cells: int
    worst: list[tuple[int, int, float]]
    share_added: float = 0.0


def material(noise: TransportNoise) -> bool:
    """Whether the transient stalls matter to the diagnosis: they hold ``NOISE_SHARE`` of the
    slowdown taken out of the measured run (``share``) *or* put back into the ideal one
    (``share_added``). The detectors judge a cause by the larger of those two views (removing it
    from the real run, adding it to the ideal one); noise that overlapping compute hides in the
    real run (DDP's bucket all-reduces under a backward on a starved host) still lands on the
    ideal run's critical path, where a detector would read it as slow communication."""
    return max(noise.share, noise.share_added) >= NOISE_SHARE


# collectives whose every member's result passes through every member's data (ring / tree
# algorithms): the members complete together, within one chunk's transfer of each other
JOINT_KINDS = re.compile(r"all_?reduce|all_?gather|reduce_?scatter|broadcast", re.IGNORECASE)


def joint_collectives(trace: Trace, engine: WhatIfEngine) -> npt.NDArray[np.bool_] | None:
    """Per collective node of ``engine`` (sorted node order, as :func:`transport_noise` reads
    them): whether its kind (the op-type key the kernel-level reader states, ``trace.graph.pool``)
    is an all-reduce, all-gather, reduce-scatter or broadcast, whose members complete together.
    An all-to-all or a send/recv is not: a slow pair holds only its own members. None without an
    explicit graph."""
    g = trace.graph
    if g is None or len(g.pool) != engine.template.n_nodes:
        return None
    coll = sorted(v for grp in engine.template.groups for v in grp)
    return np.array([bool(JOINT_KINDS.search(g.pool[v].split(" [")[0])) for v in coll], dtype=bool)


def transport_noise(engine: WhatIfEngine,
                    joint: npt.NDArray[np.bool_] | None = None) -> tuple[TransportNoise, WhatIfEngine] | None:
    """Split the collectives' transfer times into persistent slowness and transient noise.

    Transfer time excludes waiting for peers (end minus the last member's start), so what is left
    above a collective's pooled ideal is the transport's own time. The job's noise floor is the
    median spread (MAD over median) of one collective's transfer across the traced steps (at least
    ``NOISE_MIN_STEPS``). A (collective node, DP rank) series is *persistently* slow when its
    transfer exceeds the ideal by more than ``NOISE_FLOORS`` noise floors in at least
    ``NOISE_PERSIST`` of the steps, and its typical excess is at least ``STALL_Z`` standard errors
    of the mean step time (robust sigma over sqrt(steps)): a slow link or group is slow in most
    steps, by more than the step-to-step noise can hide. Every other excess over the ideal lands on
    random collectives in random steps, after every member arrived: the transport's (or the hosts'
    scheduling) noise, not a straggler. Returns the split and a copy of
    ``engine`` in which every transfer of a transient series is set to the lower of the series'
    median over the steps and the ideal, in both directions (persistent series: capped at their
    typical value, so the persistent slowness stays), with the measured step times lowered per
    step by what that saves in the simulation (the unexplained launch time stays the same in
    seconds); None when the engine has no collectives or too few steps. The engine passed in is
    left as it is.

    Why both directions: capping a transient series only from above (at the ideal) leaves its
    fast steps below it, so the view's transfers averaged under their own ideal (on the fifth
    held-out part's ``fsdp-slow-2rank`` 50.6 ms per step and rank against an ideal 62.1 ms) and a
    weak slow rank's or a stall's slowdown had nothing left to show against. The series' median
    is its robust level; setting every step to it removes the step-to-step spread (the transient
    noise) without that bias. Never above the ideal: what a transient series holds above its
    type's ideal is the transport's noise, not a straggler.

    ``joint`` (:func:`joint_collectives`) marks the collectives whose members complete together
    (all-reduce, all-gather, reduce-scatter, broadcast): there the transport's own time in a step
    is the *earliest* member's transfer. A member that sees the same collective complete later
    than its peer did was late itself (its thread off the CPU, its host busy), which no link or
    group explains; so persistence and the kept level of such a series are read on the earliest
    member's transfer of each step, and the member's time above it is capped like noise. A slow
    link or NIC in a ring holds every member, so it stays persistent. Without ``joint`` every
    series is read on its own transfer."""
    t = engine.template
    if not t.groups or len(engine.steps) < NOISE_MIN_STEPS:
        return None
    coll = np.array(sorted(v for g in t.groups for v in g), dtype=np.int64)
    orig = engine.orig_dense
    x = orig[coll]  # (n_coll, dp, steps)
    ideal = engine.ideal_node[coll][:, None, None]
    typical = np.median(x, axis=2, keepdims=True)
    spread = np.median(np.abs(x - typical), axis=2) / np.maximum(np.abs(typical[..., 0]), 1e-12)
    floor = float(np.median(spread))
    # the transport's time of each series: a joint collective's earliest member's in each step
    xt = x if joint is None else np.where(joint[:, None, None], x.min(axis=1, keepdims=True), x)
    typical_t = np.median(xt, axis=2, keepdims=True)
    elevated = xt > ideal * (1.0 + NOISE_FLOORS * floor)
    persistent = elevated.mean(axis=2) >= NOISE_PERSIST  # (n_coll, dp)
    # A call that only hands its collective to the backend's thread (an unsynchronised node: gloo's
    # c10d enqueue) moves no data and waits for no peer; its time above the ideal is its own
    # thread held by the host, never the transport's. It is capped like noise whatever its
    # persistence; the data moves in the backend's collective, judged above as any other.
    persistent &= np.array([t.group_dp_sync[int(t.group[v])] for v in coll], dtype=bool)[:, None]
    t_nd = engine.nodelay_step_times

    def capped(keep: npt.NDArray[np.bool_]) -> tuple[npt.NDArray[np.float64], float, WhatIfEngine]:
        cap = np.where(keep[..., None], np.maximum(typical_t, ideal), ideal)
        dense = orig.copy()
        # persistent series capped at their (transport's) typical level; transient ones at their
        # median (at most the ideal) in every step, fast steps raised as slow ones lowered (no low
        # bias)
        dense[coll] = np.where(keep[..., None], np.minimum(x, cap), np.minimum(typical, ideal))
        kept = float(np.where(keep, typical_t[..., 0] - ideal[..., 0], 0.0).clip(0.0).sum(axis=0).mean())
        clean = replace(engine, orig_dense=dense, _nodelay=None, _rows={})
        clean.actual_step_times = engine.actual_step_times - (t_nd - clean.nodelay_step_times)
        return cap, kept, clean

    cap, kept, clean = capped(persistent)
    if persistent.any():
        # Each persistent series must also stand out of the step-to-step noise: an excess smaller
        # than what this many steps can resolve (3 standard errors of the mean) is noise too.
        bar = STALL_Z * step_sigma(clean.actual_step_times) / np.sqrt(len(engine.steps))
        persistent &= typical_t[..., 0] - ideal[..., 0] >= bar
        cap, kept, clean = capped(persistent)
    clipped = x > cap
    t_cl = clean.nodelay_step_times
    t_id = engine.ideal_step_time
    t_o, t_c = float(t_nd.mean()), float(t_cl.mean())
    gap = t_o - t_id
    share = (t_o - t_c) / gap if gap > 1e-12 * max(t_o, 1e-12) else 0.0
    share_added = added_share(engine, coll, clean.orig_dense, gap) if gap > 1e-12 * max(t_o, 1e-12) else 0.0
    extra = np.where(clipped, x - cap, 0.0).max(axis=1)  # (n_coll, steps)
    top = np.argsort(extra, axis=None)[::-1][:3]
    worst = [(int(coll[i // extra.shape[1]]), int(engine.steps[i % extra.shape[1]]),
              float(extra.flat[i])) for i in top if extra.flat[i] > 0]
    noise = TransportNoise(
        t_orig=t_o, t_clean=t_c, t_ideal=t_id, share=float(share), floor=floor,
        persistent=[(int(coll[a]), int(b)) for a, b in zip(*np.nonzero(persistent), strict=True)],
        persistent_s=kept, clipped=int(clipped.sum()), cells=int(x.size), worst=worst,
        share_added=float(share_added),
    )
    return noise, clean


def added_share(engine: WhatIfEngine, coll: npt.NDArray[np.int64], clean: npt.NDArray[np.float64],
                gap: float) -> float:
    """The mean cost, over ``gap``, of putting the collectives' measured transfers (``coll``:
    their nodes) instead of their capped ones (``clean``, the capped dense copy) into the ideal
    run, in which every other node sits at its type's ideal."""
    is_coll = np.zeros(engine.template.n_nodes, dtype=bool)
    is_coll[coll] = True
    ideal3 = engine.ideal_node[:, None, None]

    def put_back(src: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        return engine.simulate_dense(lambda v: (src[v] if is_coll[v] else ideal3[v])[None], 1)[0]

    return float((put_back(engine.orig_dense) - put_back(clean)).mean()) / gap


@dataclass
class HostBursts:
    """Transient compute bursts of a kernel-level job (see :func:`host_bursts`).

    ``cells``: (DP rank, step id, extra seconds, sigma) of the (rank, step) cells whose compute ran
    far above the rank's own typical, largest first; ``floor``: the job's per-rank step-to-step
    spread of compute (robust sigma of the log ratio to the rank's own median); ``share``: the
    part of the slowdown ``(t_before - t_after) / (t_orig - t_ideal)`` the capped bursts hold;
    ``t_after``: the mean simulated step time (no launch delay) without them."""

    cells: list[tuple[int, int, float, float]]
    floor: float
    share: float
    t_after: float


def host_bursts(
    trace: Trace, engine: WhatIfEngine, t_orig: float, t_ideal: float
) -> tuple[HostBursts, WhatIfEngine] | None:
    """Cap the transient compute bursts of ``engine`` (a kernel-level job's, possibly already
    without its transport noise): a copy whose bursts are gone, or None when there are none.

    Per DP rank and step the compute (forward, backward and optimizer segments) is compared with
    that rank's own median step: a rank slower in most steps has a slow median and no bursts, a
    step in which other work on the host took the rank's CPU stands out of the job's own
    step-to-step spread (``BURST_Z`` robust sigma, pooled over ranks, and at least ``BURST_REL``
    of the rank's typical compute). In a burst cell every compute segment is capped at its own
    median over the steps on that rank, except forwards that look paused (the GC detector's
    shape: a collector's pause is the cause to find, not noise). The pooled ideal of each
    compute type is taken again over the capped durations (a burst of 500 ms inflates the mean
    of its type), and the measured step times are lowered by what the cap saves in the simulation.
    Needs ``NOISE_MIN_STEPS`` steps and two DP ranks."""
    t = engine.template
    n_s = len(engine.steps)
    if n_s < NOISE_MIN_STEPS or t.dp < 2:
        return None
    comp = np.flatnonzero(np.isin(t.optype, COMPUTE_CODES))
    if not len(comp):
        return None
    x = engine.orig_dense[comp]  # (n_comp, dp, steps)
    per_cell = x.sum(axis=0)  # (dp, steps)
    typical = np.median(per_cell, axis=1, keepdims=True)
    r = np.log(np.maximum(per_cell, 1e-12) / np.maximum(typical, 1e-12))
    floor = max(1.4826 * float(np.median(np.abs(r))), MIN_LOG_SIGMA)
    burst = (r >= BURST_Z * floor) & (per_cell - typical >= BURST_REL * typical)
    if not burst.any():
        return None
    cap = np.where(burst[None], np.median(x, axis=2, keepdims=True), np.inf)
    stats = compute_stats(trace, engine)
    keep = np.zeros(len(trace.ops), dtype=bool)
    pauses = stats.fwd_index[paused_forwards(stats)]
    # a pause stays: it is the GC's; a freeze of several workers at one moment is the host's
    cell = stats.op_dp[pauses].astype(np.int64) * stats.pp + stats.op_pp[pauses]
    frozen = simultaneous_freezes(stats, pauses, cell, stats.op_step_index[pauses])
    keep[pauses[~frozen]] = True
    if keep.any():
        kept = np.zeros_like(engine.orig_dense, dtype=bool)
        kept[t.node_of_row[keep], t.dp_of_row[keep], t.step_of_row[keep]] = True
        cap = np.where(kept[comp], np.inf, cap)
    dense = engine.orig_dense.copy()
    dense[comp] = np.minimum(x, cap)
    ideal = engine.ideal_node.copy()
    pool = t.optype if t.pool is None else t.pool
    for o in np.unique(pool[comp]):
        nodes = np.flatnonzero(pool == o)
        ideal[nodes] = dense[nodes].mean()
    clean = replace(engine, orig_dense=dense, ideal_node=ideal, _nodelay=None, _ideal=None, _rows={})
    saved = engine.nodelay_step_times - clean.nodelay_step_times
    clean.actual_step_times = engine.actual_step_times - saved
    t_after = float(clean.nodelay_step_times.mean())
    gap = t_orig - t_ideal
    share = float(saved.mean()) / gap if gap > 1e-12 * max(t_orig, 1e-12) else 0.0
    extra = np.where(burst, per_cell - typical[:, :1], 0.0)
    order = np.argsort(extra, axis=None)[::-1]
    cells = [(int(d), int(engine.steps[k]), float(extra[d, k]), float(r[d, k] / floor))
             for d, k in (np.unravel_index(i, extra.shape) for i in order) if burst[d, k]]
    return HostBursts(cells=cells, floor=floor, share=float(share), t_after=t_after), clean


def with_durations(trace: Trace, engine: WhatIfEngine) -> Trace:
    """``trace`` with its compute ops' durations taken from ``engine`` (a capped copy of its own);
    communication rows keep theirs (the engine holds transfer times for them)."""
    t = engine.template
    is_comp = np.isin(trace.ops.optype, COMPUTE_CODES)
    dur = trace.ops.duration.copy()
    dur[is_comp] = engine.orig_dense[t.node_of_row[is_comp], t.dp_of_row[is_comp], t.step_of_row[is_comp]]
    ops = OpTable(**{**{k: getattr(trace.ops, k) for k in trace.ops.__dataclass_fields__}, "duration": dur})
    return replace(trace, ops=ops)


def step_sigma(step_times: npt.NDArray[np.float64]) -> float:
    """The robust standard deviation (1.4826 x MAD) of per-step times: the job's step-to-step noise."""
    return 1.4826 * float(np.median(np.abs(step_times - np.median(step_times))))


def quiet_launch_gaps(stats: TraceStats, step_times: npt.NDArray[np.float64],
                      unexplained: npt.NDArray[np.float64] | None = None) -> TraceStats:
    """``stats`` with every idle gap before a step's first op that is shorter than ``STALL_Z``
    robust standard deviations (1.4826 x MAD) of the job's other measured step times set to 0,
    unless (with ``unexplained``, per step: measured minus simulated time without launch delays)
    it stands ``STALL_Z`` robust standard deviations out of the other steps' unexplained time and
    is at least ``GAP_STEP_SHARE`` of their median step time.

    On a noisy host the step time moves by milliseconds from step to step on its own; a gap of that
    size before the first op is part of that noise, not an input stall (a stall that costs the job
    time stands out of it). A step's gaps are judged against the spread of the *other* steps'
    times: the step under test is no part of the noise it is judged against (one 65 ms stall in
    six steps of a noisy job otherwise widens the spread it has to clear). Most of a busy host's
    step-to-step noise is in its compute and transfers, which the simulation replays: the time it
    leaves unexplained varies far less (a few ms where the steps vary by 50-100 ms), and a gap the
    model cannot explain is measured against that. The share of the step keeps a gap of a few ms
    (a process descheduled before its first op) from counting on a job whose unexplained time is
    nearly constant. With fewer than ``NOISE_MIN_STEPS`` steps the spread is unknown and ``stats``
    is returned as it is."""
    n = len(step_times)
    if n < NOISE_MIN_STEPS or stats.launch_idle.size == 0:
        return stats
    aligned = len(stats.launch_idle) == n
    if aligned:
        others = ~np.eye(n, dtype=bool)
        sigma = np.array([step_sigma(step_times[others[k]]) for k in range(n)])
    else:  # steps not aligned with the gaps' (not expected): the whole job's spread
        sigma = np.full(len(stats.launch_idle), step_sigma(step_times))
    shape = (-1,) + (1,) * (stats.launch_idle.ndim - 1)
    keep = stats.launch_idle >= STALL_Z * sigma.reshape(shape)
    if unexplained is not None and aligned and len(unexplained) == n:
        sigma_u = np.array([step_sigma(unexplained[others[k]]) for k in range(n)])
        typical = np.array([float(np.median(step_times[others[k]])) for k in range(n)])
        keep |= ((stats.launch_idle >= STALL_Z * sigma_u.reshape(shape))
                 & (stats.launch_idle >= GAP_STEP_SHARE * typical.reshape(shape)))
    return replace(stats, launch_idle=np.where(keep, stats.launch_idle, 0.0))


def judge_noises(
    trace: Trace, engine: WhatIfEngine, t_o: float, t_id: float
) -> tuple[TransportNoise | None, HostBursts | None, WhatIfEngine]:
    """Which of the two noises (transient collective stalls, one-step compute bursts) the view
    removes, and the engine without them.

    Each noise is material when it holds at least ``NOISE_SHARE`` of the slowdown on its own, or
    of the slowdown the other one leaves when that other one is material on its own: a burst of
    seconds inflates the slowdown a transport stall is weighed against (and the other way round),
    so judged one after the other against the whole slowdown a stall that holds most of what the
    burst leaves stays under the bar. ``t_o`` / ``t_id``: the engine's mean simulated step time
    (no launch delay) and its ideal. Returns (transport noise or None, bursts or None, engine with
    the material ones capped; ``engine`` itself when none is)."""
    gap = max(t_o - t_id, 1e-12)
    joint = joint_collectives(trace, engine)
    found_t = transport_noise(engine, joint)
    found_b = host_bursts(trace, engine, t_o, t_id)
    b_alone = found_b is not None and found_b[0].share >= NOISE_SHARE
    if found_t is not None and material(found_t[0]):
        stalls, after_t = found_t
        t_left = float(after_t.nodelay_step_times.mean())
        found = host_bursts(trace, after_t, t_left, t_id)  # its share: of the slowdown the stalls leave
        if found is None or not (b_alone or found[0].share >= NOISE_SHARE):
            return stalls, None, after_t
        # the notes state the bursts' share of the whole slowdown
        return stalls, replace(found[0], share=found[0].share * (t_left - t_id) / gap), found[1]
    if found_b is not None and b_alone:
        bursts, base = found_b
        left = transport_noise(base, joint)  # its share: of the slowdown the bursts leave
        if left is None or not material(left[0]):
            return None, bursts, base
        # the notes state the stalls' share of the whole slowdown and S with both removed
        t_clean = float(left[1].nodelay_step_times.mean())
        noise = replace(left[0], t_orig=t_o, t_ideal=t_id, share=(t_o - t_clean) / gap - bursts.share)
        return noise, bursts, left[1]
    return None, None, engine


@dataclass
class DetectionView:
    """What the detectors judge a kernel-level job on when transport or host noise is material: the
    what-if report and statistics of the job with its transient collective stalls and compute
    bursts capped (the real report stays the diagnosis's), the splits themselves, and the notes
    and summary sentence that say so. ``noise`` / ``bursts`` are None when not measured."""

    report: WhatIfReport
    stats: TraceStats
    noise: TransportNoise | None
    notes: list[str]
    sentence: str
    bursts: HostBursts | None = None


def detection_view(trace: Trace, engine: WhatIfEngine, report: Report) -> DetectionView | None:
    """The detection view of a kernel-level job whose transient collective stalls
    (:func:`transport_noise`) or transient compute bursts (:func:`host_bursts`) are material,
    the two judged together (:func:`judge_noises`: ``NOISE_SHARE`` of the slowdown, or of what
    the other material noise leaves), else None.

    Compute-side causes (a slow rank, a GC pause, an input stall) live in compute segments and
    launch gaps, which the stalls do not touch; judged against a slowdown the stalls inflate, their
    shares shrink below the detectors' bars. Slow communication judged on the capped transfers is
    what recurs in most steps: a persistent straggler, not noise. A compute burst on one rank in
    one step makes that rank the hottest worker; judged without it, a rank slow in most steps is
    the one that stands out."""
    if trace.graph is None:
        return None
    t_o = float(engine.nodelay_step_times.mean())
    t_id = engine.ideal_step_time
    noise, bursts, clean = judge_noises(trace, engine, t_o, t_id)
    if noise is None and bursts is None:
        return None
    view_trace = with_durations(trace, clean) if bursts is not None else trace
    view = analyze(view_trace, engine=clean)
    stats = quiet_launch_gaps(compute_stats(view_trace, clean), clean.actual_step_times,
                              clean.actual_step_times - clean.nodelay_step_times)
    s_orig = t_o / t_id
    notes: list[str] = []
    parts: list[str] = []
    if noise is not None:
        s_clean = noise.t_clean / noise.t_ideal
        worst = ", ".join(
            f"{node_label(engine.template, v)} in step {s} +{x * 1e3:.0f} ms" for v, s, x in noise.worst
        )
        notes.append(
            f"transport noise: {noise.clipped} of {noise.cells} collective transfers (after every member "
            f"arrived) run above their type's ideal without being slow in most steps; those transient "
            f"stalls hold "
            f"{min(noise.share, 9.99):.0%} of the slowdown (S {s_orig:.3f}, {s_clean:.3f} without them); "
            + ("" if noise.share >= NOISE_SHARE else
               f"put into the ideal run (every other op at its type's ideal) they cost "
               f"{min(noise.share_added, 9.99):.0%} of it: compute overlapping them hides them in the "
               f"measured run; ")
            + f"noise floor: one collective's transfer varies by {noise.floor:.0%} (median absolute "
            f"deviation over median) across steps; largest: {worst or 'none'}. Causes are judged on the "
            f"job without them; slow communication only where it recurs in most steps "
            f"({noise.persistent_s * 1e3:.1f} ms per step of recurring transfer time above the ideal)"
        )
        parts.append(
            f" Transport noise: transient collective stalls, on random collectives in random steps after "
            f"every member arrived, hold {min(noise.share, 9.99):.0%} of the slowdown (S {s_clean:.3f} "
            f"without them); they are the network's or the hosts' noise, not a straggler, and causes are "
            f"judged without them."
        )
    if bursts is not None:
        worst_b = ", ".join(f"rank {d} in step {s} +{x * 1e3:.0f} ms ({z:.1f} sigma)"
                            for d, s, x, z in bursts.cells[:3])
        notes.append(
            f"host noise: {len(bursts.cells)} (rank, step) compute bursts ran far above that rank's own "
            f"typical step (at least {BURST_Z:.0f} robust sigma of the job's per-rank step spread, "
            f"{np.expm1(bursts.floor):.0%}, and +{BURST_REL:.0%}); largest: {worst_b}. They hold "
            f"{min(bursts.share, 9.99):.0%} of the slowdown; causes are judged with those segments at "
            f"the rank's own typical (forwards that look paused kept), so a rank slow in most steps "
            f"stands out and a one-step burst does not"
        )
        parts.append(
            f" Host noise: one-step compute bursts ({len(bursts.cells)}; other work on the machine) hold "
            f"{min(bursts.share, 9.99):.0%} of the slowdown; causes are judged without them."
        )
    return DetectionView(report=view, stats=stats, noise=noise, notes=notes, sentence="".join(parts),
                         bursts=bursts)
