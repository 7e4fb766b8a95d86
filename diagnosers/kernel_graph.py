"""Explicit dependency graphs: a reader that knows the job's dependencies states them itself.

The Megatron dependency model of :mod:`diagnosers.graph` rebuilds edges from op names (1F1B
microbatches, P2P pairs, the DP tail). A kernel-level trace of a plain PyTorch job has no such
names; its reader (:mod:`diagnosers.readers.kineto_kernels`) derives the edges from the trace
itself (stream order, launch order, stream waits, synchronisations) and hands them over as an
:class:`ExplicitGraph` attached to the :class:`~diagnosers.model.Trace`. This module turns that
graph into the engine's :class:`~diagnosers.graph.Template`, so the simulator, the what-if report
and the detectors run unchanged.

Node identity is ``(optype code, seq_id)`` on stage 0 (kernel-level jobs are single-stage); the
graph is one step of one DP rank and, as in the method, the same for every DP rank and step.
Each collective node is a communication group of its own, synchronised across the DP ranks of the
step: its transfer time is its end minus the latest start of any rank's member (METHOD.md A3).
``pool`` names the op type each node's ideal duration is pooled over (ops of the same type take
the same time), finer than the coarse ``optype`` the report attributes by.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from diagnosers.graph import Template, _node_name, _topo_order
from diagnosers.model import Trace, TraceError
from diagnosers.readers.normalize import dense_ids

if TYPE_CHECKING:
    from diagnosers.detectors.base import TraceStats
    from diagnosers.report import WhatIfReport
    from diagnosers.whatif import WhatIfEngine


@dataclass
class ExplicitGraph:
    """One step of one rank: nodes, the nodes each waits for, which are collectives, op types.

    ``nodes[i] = (optype code, seq_id)``; ``deps[i]`` lists node indices; ``collective[i]`` marks a
    DP-synchronised collective; ``pool[i]`` is its op-type key for the ideal duration.
    ``model`` and ``why`` say which job model produced it, for the report's notes.
    """

    nodes: list[tuple[int, int]]
    deps: list[list[int]]
    collective: list[bool]
    pool: list[str]
    model: str = "kernel-level"
    why: str = ""
    notes: list[str] = field(default_factory=list)


def template_from_explicit(trace: Trace, g: ExplicitGraph) -> Template:
    """The engine template of ``trace`` whose dependencies ``g`` states.

    Raises ``TraceError`` when a row names a node the graph lacks, a (node, DP rank, step) cell is
    filled twice or left empty, or the graph has a cycle."""
    ops, meta = trace.ops, trace.meta
    src = trace.sources[0] if trace.sources else None
    dp = meta.dp
    n = len(g.nodes)
    index = {key: i for i, key in enumerate(g.nodes)}
    steps_arr, step_of_row = dense_ids(ops.step)
    node_of_row = np.empty(len(ops), dtype=np.int64)
    for i, (o, q) in enumerate(zip(ops.optype.tolist(), ops.seq_id.tolist(), strict=True)):
        v = index.get((o, q))
        if v is None:
            raise TraceError(f"op #{q} of its type has no node in the kernel-level graph",
                             file=src, rank=int(ops.rank[i]), step=int(ops.step[i]))
        node_of_row[i] = v
    dp_of_row = ops.dp_rank.astype(np.int64)
    ns = len(steps_arr)
    cells = np.bincount((node_of_row * dp + dp_of_row) * ns + step_of_row, minlength=n * dp * ns)
    if (cells != 1).any():
        bad = int(np.flatnonzero(cells != 1)[0])
        v, rest = divmod(bad, dp * ns)
        d, s = divmod(rest, ns)
        raise TraceError(
            f"kernel-level node {v} holds {int(cells[bad])} ops on dp_rank {d} (one expected): the "
            "ranks or steps do not run the same kernels",
            file=src,
            step=int(steps_arr[s]),
        )
    optype = np.array([o for o, _ in g.nodes], dtype=np.int64)
    seq = np.array([q for _, q in g.nodes], dtype=np.int64)
    stage = np.zeros(n, dtype=np.int64)
    group = np.full(n, -1, dtype=np.int64)
    groups: list[list[int]] = []
    for v in range(n):
        if g.collective[v]:
            group[v] = len(groups)
            groups.append([v])
    deps = [sorted(set(d)) for d in g.deps]
    order = _topo_order(n, deps, group, groups, lambda v: _node_name(stage, optype, seq, v), src)
    _, pool = np.unique(np.asarray(g.pool, dtype=object).astype(str), return_inverse=True)
    return Template(
        n_nodes=n,
        stage=stage,
        optype=optype,
        seq=seq,
        deps=deps,
        group=group,
        groups=groups,
        group_dp_sync=[True] * len(groups),
        order=order,
        node_of_row=node_of_row,
        dp_of_row=dp_of_row,
        step_of_row=step_of_row.astype(np.int64),
        steps=[int(x) for x in steps_arr],
        dp=dp,
        pp=1,
        vpp=1,
        notes=list(g.notes),
        pool=pool.reshape(-1).astype(np.int64),
    )


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
    ``worst``: (node, step id, extra seconds), the largest transient excesses first.
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


def transport_noise(engine: WhatIfEngine) -> tuple[TransportNoise, WhatIfEngine] | None:
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
    ``engine`` whose transfers are capped at the ideal (persistent series: at their typical value,
    so the persistent slowness stays), with the measured step times lowered per step by what the
    cap saves in the simulation (the unexplained launch time stays the same in seconds); None when
    the engine has no collectives or too few steps. The engine passed in is left as it is."""
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
    elevated = x > ideal * (1.0 + NOISE_FLOORS * floor)
    persistent = elevated.mean(axis=2) >= NOISE_PERSIST  # (n_coll, dp)
    t_nd = engine.nodelay_step_times

    def capped(keep: npt.NDArray[np.bool_]) -> tuple[npt.NDArray[np.float64], float, WhatIfEngine]:
        cap = np.where(keep[..., None], np.maximum(typical, ideal), ideal)
        dense = orig.copy()
        dense[coll] = np.minimum(x, cap)
        kept = float(np.where(keep, typical[..., 0] - ideal[..., 0], 0.0).clip(0.0).sum(axis=0).mean())
        clean = replace(engine, orig_dense=dense, _nodelay=None, _rows={})
        clean.actual_step_times = engine.actual_step_times - (t_nd - clean.nodelay_step_times)
        return cap, kept, clean

    cap, kept, clean = capped(persistent)
    if persistent.any():
        # Each persistent series must also stand out of the step-to-step noise: an excess smaller
        # than what this many steps can resolve (3 standard errors of the mean) is noise too.
        bar = STALL_Z * step_sigma(clean.actual_step_times) / np.sqrt(len(engine.steps))
        persistent &= typical[..., 0] - ideal[..., 0] >= bar
        cap, kept, clean = capped(persistent)
    clipped = x > cap
    t_cl = clean.nodelay_step_times
    t_id = engine.ideal_step_time
    t_o, t_c = float(t_nd.mean()), float(t_cl.mean())
    share = (t_o - t_c) / (t_o - t_id) if t_o - t_id > 1e-12 * max(t_o, 1e-12) else 0.0
    extra = np.where(clipped, x - cap, 0.0).max(axis=1)  # (n_coll, steps)
    top = np.argsort(extra, axis=None)[::-1][:3]
    worst = [(int(coll[i // extra.shape[1]]), int(engine.steps[i % extra.shape[1]]),
              float(extra.flat[i])) for i in top if extra.flat[i] > 0]
    noise = TransportNoise(
        t_orig=t_o, t_clean=t_c, t_ideal=t_id, share=float(share), floor=floor,
        persistent=[(int(coll[a]), int(b)) for a, b in zip(*np.nonzero(persistent), strict=True)],
        persistent_s=kept, clipped=int(clipped.sum()), cells=int(x.size), worst=worst,
    )
    return noise, clean


def step_sigma(step_times: npt.NDArray[np.float64]) -> float:
    """The robust standard deviation (1.4826 x MAD) of per-step times: the job's step-to-step noise."""
    return 1.4826 * float(np.median(np.abs(step_times - np.median(step_times))))


def quiet_launch_gaps(stats: TraceStats, step_times: npt.NDArray[np.float64]) -> TraceStats:
    """``stats`` with every idle gap before a step's first op that is shorter than ``STALL_Z``
    robust standard deviations (1.4826 x MAD) of the job's measured step times set to 0.

    On a noisy host the step time moves by milliseconds from step to step on its own; a gap of that
    size before the first op is part of that noise, not an input stall (a stall that costs the job
    time stands out of it). With fewer than ``NOISE_MIN_STEPS`` steps the spread is unknown and
    ``stats`` is returned as it is."""
    if len(step_times) < NOISE_MIN_STEPS or stats.launch_idle.size == 0:
        return stats
    sigma = step_sigma(step_times)
    idle = np.where(stats.launch_idle < STALL_Z * sigma, 0.0, stats.launch_idle)
    return replace(stats, launch_idle=idle)


@dataclass
class DetectionView:
    """What the detectors judge a kernel-level job on when transport noise is material: the what-if
    report and statistics of the job with its transient collective stalls capped (the real report
    stays the diagnosis's), the split itself, and the notes and summary sentence that say so."""

    report: WhatIfReport
    stats: TraceStats
    noise: TransportNoise
    notes: list[str]
    sentence: str


def detection_view(trace: Trace, engine: WhatIfEngine, report: WhatIfReport) -> DetectionView | None:
    """The detection view of a kernel-level job whose transient collective stalls hold at least
    ``NOISE_SHARE`` of its slowdown (:func:`transport_noise`), else None.

    Compute-side causes (a slow rank, a GC pause, an input stall) live in compute segments and
    launch gaps, which the stalls do not touch; judged against a slowdown the stalls inflate, their
    shares shrink below the detectors' bars. Slow communication judged on the capped transfers is
    what recurs in most steps: a persistent straggler, not noise."""
    from diagnosers.detectors import compute_stats
    from diagnosers.whatif import analyze

    if trace.graph is None:
        return None
    found = transport_noise(engine)
    if found is None:
        return None
    noise, clean = found
    if noise.share < NOISE_SHARE:
        return None
    view = analyze(trace, engine=clean)
    stats = quiet_launch_gaps(compute_stats(trace, clean), clean.actual_step_times)
    s_orig, s_clean = noise.t_orig / noise.t_ideal, noise.t_clean / noise.t_ideal
    worst = ", ".join(
        f"{_node_label(engine.template, v)} in step {s} +{x * 1e3:.0f} ms" for v, s, x in noise.worst
    )
    notes = [
        f"transport noise: {noise.clipped} of {noise.cells} collective transfers (after every member "
        f"arrived) run above their type's ideal without being slow in most steps; those transient "
        f"stalls hold "
        f"{min(noise.share, 9.99):.0%} of the slowdown (S {s_orig:.3f}, {s_clean:.3f} without them); "
        f"noise floor: one collective's transfer varies by {noise.floor:.0%} (median absolute "
        f"deviation over median) across steps; largest: {worst or 'none'}. Causes are judged on the "
        f"job without them; slow communication only where it recurs in most steps "
        f"({noise.persistent_s * 1e3:.1f} ms per step of recurring transfer time above the ideal)",
    ]
    sentence = (
        f" Transport noise: transient collective stalls, on random collectives in random steps after "
        f"every member arrived, hold {min(noise.share, 9.99):.0%} of the slowdown (S {s_clean:.3f} "
        f"without them); they are the network's or the hosts' noise, not a straggler, and causes are "
        f"judged without them."
    )
    return DetectionView(report=view, stats=stats, noise=noise, notes=notes, sentence=sentence)


def _node_label(t: Template, v: int) -> str:
    from diagnosers.model import OPTYPES

    return f"{OPTYPES[int(t.optype[v])]} #{int(t.seq[v])}"
