"""Timelines of the actual and the straggler-free run: critical paths, where the time goes, and a
Chrome trace-event export (docs/WHATIF.md, "Timelines").

Two runs of the same job over the same template graph (``diagnosers.graph``):

- **actual**: the recorded op times. Its critical path is taken on the *replay* of the recording
  (recorded durations and transfer times plus the measured launch delays, simulated), which
  reproduces the recorded start and end of every op except where the engine clamped a measurement
  (a transfer or launch delay at or below -10 ms), so its segments tile the step exactly;
- **straggler-free**: every op at its type's typical duration, launch delays 0 (the engine's ideal
  run; the same for every DP rank and step).

Everything here is a separate pass over the simulator's kept start and end times
(``simulate(..., keep=True)``); the simulator's hot path is not touched, and nothing is computed
unless asked for (``analyze``'s report does not include it).

Critical path of a step: start at the op that ends last (over every worker), then walk back: a local
op's start is set by the dependency that ended last (the argmax predecessor) plus its launch delay;
a communication group starts when its last member started (over every DP rank when the group is
DP-synchronised), so the walk crosses to that member (a *group entry*, time 0) and continues from it.
The segments — op time, transfer time after the group started, launch gaps — tile ``[0, step end]``,
so the path's length is the run's step time and each op's share is its segment over that length.
On the actual run, a launch gap during which the same worker ran another op is walked through
that op instead (the recorded program order, which the graph does not hold; see ``path_cells``).

Where the time goes, per worker and step, over ``[step start, the worker's last op end]``: each
instant is *compute* if a compute op runs, else *exposed communication* if a communication op is
transferring (after its group started), else *waiting on peers* if a communication op waits for its
group's last member to start, else a *launch gap* (no op runs: the next op's dependencies have all
ended, so the time is CPU-side; dependencies never cross workers, only groups do). Waiting is split
into *bubble* — the waiting the same worker has in the straggler-free run, the pipeline's own
structure — and *straggler wait*, the excess: ``bubble = min(wait, wait_straggler_free)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, Field

from diagnosers.graph import EPS_MATCH, Template
from diagnosers.model import OPTYPE_KIND, OPTYPES, OpKind, TraceError
from diagnosers.simulate import Array, simulate
from diagnosers.whatif import WhatIfEngine

RunName = Literal["actual", "straggler-free"]
SegmentKind = Literal["compute", "communication", "launch-gap", "group-entry"]

MAX_TIMELINE_STEPS = 16  # steps per Chrome export: the file holds about 2 x ops-per-step x steps events
MIN_GAP = 1e-6  # s; shorter launch gaps on a critical path are folded into the op after them
STEP_SPACING = 1.05  # chosen steps are laid out one after another, 5% of the longer run apart
US = 1e6  # trace-event timestamps are microseconds

_IS_COMPUTE = np.array([OPTYPE_KIND[o] is OpKind.COMPUTE for o in OPTYPES])


# ----------------------------------------------------------------------------------------------
# result models


class PathSegment(BaseModel):
    """One op on a critical path and the time it holds the path (seconds from the step start)."""

    op: str = Field(description="template op identity optype_seq_stage")
    optype: str
    dp_rank: int
    pp_rank: int
    rank: int
    kind: SegmentKind = Field(
        description="compute: the op's run; communication: transfer after its group started; "
        "launch-gap: the gap before the op started; group-entry: the member its group waited for (0 s)"
    )
    start: float
    end: float
    time: float
    share: float = Field(description="time / path length")


class CriticalPath(BaseModel):
    """The cross-rank chain of ops that sets one step's time in one run, first op first."""

    step: int
    run: RunName
    length: float = Field(description="the run's step time (s); the segments sum to it")
    segments: list[PathSegment]
    share_by_optype: dict[str, float] = Field(description="path share per op type (launch gaps apart)")
    share_by_kind: dict[str, float]


class WorkerTime(BaseModel):
    """Where one worker's time goes in one step of the actual run (seconds; the parts sum to
    ``step_time``, from the step start to the worker's last op end)."""

    dp_rank: int
    pp_rank: int
    rank: int
    host: int
    step: int
    step_time: float
    compute: float
    exposed_comm: float
    waiting_on_peers: float
    bubble: float
    straggler_wait: float
    launch_gaps: float


class StageTime(BaseModel):
    """The same split for one stage in the straggler-free run (identical for every DP rank, step)."""

    pp_rank: int
    step_time: float
    compute: float
    exposed_comm: float
    waiting_on_peers: float


class TimelineAnalysis(BaseModel):
    """Critical paths and the time breakdown for some steps (computed on demand)."""

    steps: list[int]
    worst_step: int
    typical_step: int
    actual_step_time: dict[str, float]
    straggler_free_step_time: float
    critical_paths: list[CriticalPath]
    breakdown: list[WorkerTime]
    straggler_free_breakdown: list[StageTime]


# ----------------------------------------------------------------------------------------------
# the two runs


@dataclass
class RunTimes:
    """Per-cell times of one run, each ``(n_nodes, D, S)`` (axes may be 1 and broadcast).

    ``group_start`` is when the op's group started (its own start for a local op).
    ``program_order``: walk critical paths through the same worker's previous op across long
    launch gaps (see :func:`path_cells`).
    """

    start: Array
    end: Array
    group_start: Array
    launch: Array
    program_order: bool = False


def group_starts(t: Template, start: Array) -> Array:
    """Per cell: the start of the op's group — the latest start among its members (over every DP
    rank for DP-synchronised groups); a local op's own start."""
    out = np.array(start, dtype=np.float64, copy=True)
    for g, members in enumerate(t.groups):
        last = start[members].max(axis=0)
        if t.group_dp_sync[g]:
            last = last.max(axis=0, keepdims=True)
        out[members] = np.broadcast_to(last, out[members].shape)
    return out


def replay_run(eng: WhatIfEngine) -> RunTimes:
    """The recording replayed: original durations plus measured launch delays, simulated."""
    shape = (1, *eng.shape)
    res = simulate(
        eng.template,
        lambda v: eng.orig_dense[v][None],
        shape,
        launch=lambda v: eng.launch_dense[v][None],
        keep=True,
    )
    assert res.start is not None and res.end is not None
    start, end = res.start[:, 0], res.end[:, 0]
    return RunTimes(start, end, group_starts(eng.template, start), eng.launch_dense, program_order=True)


def straggler_free_run(eng: WhatIfEngine) -> RunTimes:
    """Every op at its type's typical duration, no launch delay (one DP rank and step, broadcast)."""
    res = simulate(eng.template, lambda v: eng.ideal_node[v], (1, 1, 1), keep=True)
    assert res.start is not None and res.end is not None
    start, end = res.start[:, 0], res.end[:, 0]
    return RunTimes(start, end, group_starts(eng.template, start), np.zeros_like(start))


def recorded_run(eng: WhatIfEngine) -> RunTimes:
    """The recorded start and end of every op (relative to its step's first start)."""
    t = eng.template
    start = eng.start_dense
    end = start + t.dense(eng.trace.ops.duration)
    return RunTimes(start, end, group_starts(t, start), eng.launch_dense)


# ----------------------------------------------------------------------------------------------
# critical path


@dataclass
class _Labels:
    """Per-worker global ranks and hosts, and the template's op names."""

    ranks: npt.NDArray[np.int64]  # (dp, pp)
    gpus_per_host: int

    @classmethod
    def of(cls, eng: WhatIfEngine) -> _Labels:
        ops = eng.trace.ops
        ranks = np.full((eng.template.dp, eng.template.pp), -1, dtype=np.int64)
        ranks[ops.dp_rank, ops.stage] = ops.rank
        return cls(ranks, eng.trace.meta.gpus_per_host)

    def rank(self, d: int, s: int) -> int:
        return int(self.ranks[d, s])

    def host(self, d: int, s: int) -> int:
        r = self.rank(d, s)
        return r // self.gpus_per_host if r >= 0 else -1


def path_cells(
    t: Template, start: Array, end: Array, launch: Array, *, same_worker: bool = False
) -> list[tuple[int, int, SegmentKind, float, float]]:
    """The critical path of one step as ``(node, dp, kind, seg_start, seg_end)``, first op first.

    ``start``, ``end``, ``launch`` are ``(n_nodes, D)`` for that step (D = 1 broadcasts). Ties go to
    the lowest node, then the lowest DP rank (numpy's argmax). Pure argmax-predecessor walk unless
    ``same_worker``: then a launch gap longer than ``MIN_GAP`` during which the same worker ran
    another op is walked through the op that ended last before the start (the recorded program
    order the graph does not hold, e.g. a receive posted only after the previous backward).
    """
    n, d_all = np.broadcast_shapes(start.shape, end.shape, launch.shape)
    end_a = np.broadcast_to(end, (n, d_all))
    # plain lists: the walk makes a few small look-ups per op, where numpy's call overhead dominates
    S = np.broadcast_to(start, (n, d_all)).tolist()
    E = end_a.tolist()
    group = t.group.tolist()
    compute = _IS_COMPUTE[t.optype].tolist()
    v, d = (int(x) for x in np.unravel_index(int(np.argmax(end_a)), end_a.shape))
    out: list[tuple[int, int, SegmentKind, float, float]] = []
    seen = {(v, d)}
    by_stage = [np.flatnonzero(t.stage == s) for s in range(t.pp)] if same_worker else []
    while True:
        g = group[v]
        if g < 0:
            out.append((v, d, "compute" if compute[v] else "communication", S[v][d], E[v][d]))
        else:
            # the member (and DP rank) that started last; the first one on ties, row-major
            cols = range(d_all) if t.group_dp_sync[g] else (d,)
            m, dm = v, d
            eff = -np.inf
            for x in t.groups[g]:
                row = S[x]
                for c in cols:
                    if row[c] > eff:
                        eff, m, dm = row[c], x, c
            out.append((v, d, "communication", eff, E[v][d]))
            if (m, dm) != (v, d):
                out.append((m, dm, "group-entry", eff, eff))
            v, d = m, dm
            seen.add((v, d))
        deps = t.deps[v]
        s_v = S[v][d]
        if not deps:
            if s_v > MIN_GAP:
                out.append((v, d, "launch-gap", 0.0, s_v))
            break
        u = deps[0]
        e_u = E[u][d]
        for x in deps[1:]:
            if E[x][d] > e_u:
                u, e_u = x, E[x][d]
        if same_worker and s_v - e_u > MIN_GAP:
            w = by_stage[int(t.stage[v])]
            we = end_a[w, d]
            ok = (we > e_u) & (we <= s_v + EPS_MATCH)  # recorded ends may trail by clock noise
            if ok.any():
                x = int(w[int(np.argmax(np.where(ok, we, -np.inf)))])
                if (x, d) not in seen:
                    u, e_u = x, E[x][d]
        if s_v - e_u > MIN_GAP:
            out.append((v, d, "launch-gap", e_u, s_v))
        seen.add((u, d))
        v = u
    out.reverse()
    # chain the segments so that they tile [0, step end]: a slightly negative launch delay (kept by
    # the engine above -10 ms) makes an op start before its predecessor ended; the overlap is
    # taken from the later op
    cur = 0.0
    tiled: list[tuple[int, int, SegmentKind, float, float]] = []
    for v, d, kind, _lo, hi in out:
        hi = max(hi, cur)
        tiled.append((v, d, kind, cur, hi))
        cur = hi
    return tiled


def critical_path(
    eng: WhatIfEngine, run: RunTimes, step_index: int, name: RunName, labels: _Labels | None = None
) -> CriticalPath:
    """The critical path of one step (index into ``eng.steps``) of a run, with shares."""
    t = eng.template
    lab = labels or _Labels.of(eng)

    def col(a: Array) -> Array:
        return a[:, :, step_index] if a.shape[2] > 1 else a[:, :, 0]

    cells = path_cells(t, col(run.start), col(run.end), col(run.launch), same_worker=run.program_order)
    length = max(c[4] for c in cells) if cells else 0.0
    segs: list[PathSegment] = []
    by_type: dict[str, float] = {}
    by_kind: dict[str, float] = {}
    for v, d, kind, lo, hi in cells:
        s = int(t.stage[v])
        share = (hi - lo) / length if length > 0 else 0.0
        opt = OPTYPES[int(t.optype[v])]
        segs.append(
            PathSegment(
                op=t.name(v),
                optype=opt,
                dp_rank=d,
                pp_rank=s,
                rank=lab.rank(d, s),
                kind=kind,
                start=lo,
                end=hi,
                time=hi - lo,
                share=share,
            )
        )
        by_kind[kind] = by_kind.get(kind, 0.0) + share
        if kind in ("compute", "communication"):
            by_type[opt] = by_type.get(opt, 0.0) + share
    return CriticalPath(
        step=eng.steps[step_index],
        run=name,
        length=length,
        segments=segs,
        share_by_optype=dict(sorted(by_type.items(), key=lambda kv: -kv[1])),
        share_by_kind=dict(sorted(by_kind.items(), key=lambda kv: -kv[1])),
    )


# ----------------------------------------------------------------------------------------------
# where the time goes

# categories in priority order: an instant counts as the highest one active
GAP, WAIT, TRANSFER, COMPUTE = 0, 1, 2, 3
N_CATEGORIES = 4


def time_breakdown(t: Template, run: RunTimes) -> Array:
    """Seconds per category ``(4, pp, D, S)`` — launch gap, waiting on peers, exposed
    communication, compute (the module docstring's rules) — plus nothing else: the four sum to each
    worker's last op end. One vectorised sweep over every worker and step at once."""
    n, d_all, s_all = np.broadcast_shapes(run.start.shape, run.end.shape, run.group_start.shape)
    shape = (n, d_all, s_all)
    start = np.broadcast_to(run.start, shape)
    end = np.broadcast_to(run.end, shape)
    eff = np.clip(np.broadcast_to(run.group_start, shape), start, end)
    stage = np.broadcast_to(t.stage[:, None, None], shape)
    key = (stage * d_all + np.arange(d_all)[None, :, None]) * s_all + np.arange(s_all)[None, None, :]
    comp = np.broadcast_to(_IS_COMPUTE[t.optype][:, None, None], shape)
    n_keys = t.pp * d_all * s_all
    worker_end = np.full(n_keys, 0.0)
    np.maximum.at(worker_end, key.ravel(), end.ravel())

    los, his, cats, keys = [], [], [], []

    def add(lo: Array, hi: Array, k: npt.NDArray[np.int64], cat: int) -> None:
        keep = hi > lo
        los.append(lo[keep])
        his.append(hi[keep])
        keys.append(k[keep])
        cats.append(np.full(int(keep.sum()), cat, dtype=np.int64))

    add(start[comp], end[comp], key[comp], COMPUTE)
    add(start[~comp], eff[~comp], key[~comp], WAIT)
    add(eff[~comp], end[~comp], key[~comp], TRANSFER)
    add(np.zeros(n_keys), worker_end, np.arange(n_keys), GAP)
    lo, hi, cat, k = (np.concatenate(x) for x in (los, his, cats, keys))

    # events: +1 at an interval's start, -1 at its end; sort by (worker-step, time)
    ev_t = np.concatenate([lo, hi])
    ev_k = np.concatenate([k, k])
    ev_c = np.concatenate([cat, cat])
    ev_d = np.concatenate([np.ones(len(lo), dtype=np.int64), -np.ones(len(lo), dtype=np.int64)])
    order = np.lexsort((ev_t, ev_k))
    ev_t, ev_k, ev_c, ev_d = ev_t[order], ev_k[order], ev_c[order], ev_d[order]
    onehot = np.zeros((len(ev_t), N_CATEGORIES), dtype=np.int64)
    onehot[np.arange(len(ev_t)), ev_c] = ev_d
    active = np.cumsum(onehot, axis=0) > 0  # after each event; every key's events net to zero
    # highest active category per elementary segment [ev_t[i], ev_t[i+1]) within one key
    top = N_CATEGORIES - 1 - np.argmax(active[:, ::-1], axis=1)
    same = ev_k[:-1] == ev_k[1:]
    seg = np.where(same, ev_t[1:] - ev_t[:-1], 0.0)
    out = np.zeros((N_CATEGORIES, n_keys))
    np.add.at(out, (top[:-1], ev_k[:-1]), seg)
    return out.reshape(N_CATEGORIES, t.pp, d_all, s_all)


# ----------------------------------------------------------------------------------------------
# step choice and the analysis


def choose_steps(eng: WhatIfEngine) -> tuple[int, int]:
    """(worst, typical) step ids: the slowest actual step, and the step whose actual time is
    closest to the median of the other steps (the worst one itself with a single step)."""
    times = eng.actual_step_times
    worst = int(np.argmax(times))
    others = [i for i in range(len(times)) if i != worst]
    if not others:
        return eng.steps[worst], eng.steps[worst]
    med = float(np.median(times[others]))
    typical = min(others, key=lambda i: (abs(float(times[i]) - med), i))
    return eng.steps[worst], eng.steps[typical]


def step_indices(eng: WhatIfEngine, steps: Sequence[int] | None) -> list[int]:
    """Indices into ``eng.steps`` of the requested step ids (default: worst and typical); raises
    ``TraceError`` naming a step id the trace does not hold."""
    if steps is None:
        worst, typical = choose_steps(eng)
        steps = [worst] if worst == typical else [worst, typical]
    where = {s: i for i, s in enumerate(eng.steps)}
    out: list[int] = []
    for s in steps:
        if int(s) not in where:
            raise TraceError(
                f"step {s} is not in the trace (it holds steps {eng.steps[0]}..{eng.steps[-1]}, "
                f"{len(eng.steps)} of them)",
                step=int(s),
            )
        if where[int(s)] not in out:
            out.append(where[int(s)])
    return out


def analyze_timeline(eng: WhatIfEngine, steps: Sequence[int] | None = None) -> TimelineAnalysis:
    """Critical paths (actual and straggler-free) and the time breakdown for ``steps`` (default:
    every traced step)."""
    t = eng.template
    idx = step_indices(eng, steps if steps is not None else eng.steps)
    lab = _Labels.of(eng)
    replay, ideal, recorded = replay_run(eng), straggler_free_run(eng), recorded_run(eng)
    paths: list[CriticalPath] = []
    free: CriticalPath | None = None  # the straggler-free run is the same in every step
    for i in idx:
        paths.append(critical_path(eng, replay, i, "actual", lab))
        free = free or critical_path(eng, ideal, i, "straggler-free", lab)
        paths.append(free.model_copy(update={"step": eng.steps[i]}))
    actual_b = time_breakdown(t, recorded)
    ideal_b = time_breakdown(t, ideal)  # (4, pp, 1, 1)
    rows: list[WorkerTime] = []
    for i in idx:
        for s in range(t.pp):
            for d in range(t.dp):
                gap, wait, transfer, compute = (float(x) for x in actual_b[:, s, d, i])
                bubble = min(wait, float(ideal_b[WAIT, s, 0, 0]))
                rows.append(
                    WorkerTime(
                        dp_rank=d,
                        pp_rank=s,
                        rank=lab.rank(d, s),
                        host=lab.host(d, s),
                        step=eng.steps[i],
                        step_time=gap + wait + transfer + compute,
                        compute=compute,
                        exposed_comm=transfer,
                        waiting_on_peers=wait,
                        bubble=bubble,
                        straggler_wait=wait - bubble,
                        launch_gaps=gap,
                    )
                )
    stage_rows = [
        StageTime(
            pp_rank=s,
            step_time=float(ideal_b[:, s, 0, 0].sum()),
            compute=float(ideal_b[COMPUTE, s, 0, 0]),
            exposed_comm=float(ideal_b[TRANSFER, s, 0, 0]),
            waiting_on_peers=float(ideal_b[WAIT, s, 0, 0]),
        )
        for s in range(t.pp)
    ]
    worst, typical = choose_steps(eng)
    return TimelineAnalysis(
        steps=[eng.steps[i] for i in idx],
        worst_step=worst,
        typical_step=typical,
        actual_step_time={str(eng.steps[i]): float(eng.actual_step_times[i]) for i in idx},
        straggler_free_step_time=float(eng.ideal_step_time),
        critical_paths=paths,
        breakdown=rows,
        straggler_free_breakdown=stage_rows,
    )


# ----------------------------------------------------------------------------------------------
# Chrome trace-event export


def _us(x: float) -> int:
    """Seconds to whole microseconds: integer timestamps convert to a viewer's nanoseconds
    exactly, so slices that touch never overlap by a rounding nanosecond."""
    return round(x * US)


RUNS: tuple[tuple[int, str, str], ...] = (
    (1, "actual", "actual"),
    (2, "straggler-free", "straggler-free (simulated)"),
)


def lane_tid(run_no: int, lane: int) -> int:
    """Thread id of a run's lane: 10 x run (1 actual, 2 straggler-free) + lane."""
    return 10 * run_no + lane


def assign_lanes(slices: list[tuple[int, int, int]]) -> list[int]:
    """Lanes for ``(key, ts, end)`` slices so that on one lane slices nest or do not overlap.

    The Trace Event Format requires complete events on one thread to nest (Perfetto drops the
    ones that overlap partially), while a worker's communication overlaps its compute (a send
    still finishing as the next compute starts). Greedy: slices by (start, longest first), each
    into the first lane of its key whose innermost open slice ends no earlier than it does.
    """
    order = sorted(range(len(slices)), key=lambda j: (slices[j][0], slices[j][1], -slices[j][2]))
    stacks: dict[int, list[list[int]]] = {}
    out = [0] * len(slices)
    for j in order:
        key, ts, end = slices[j]
        lanes = stacks.setdefault(key, [])
        for k, stack in enumerate(lanes):
            while stack and stack[-1] <= ts:
                stack.pop()
            if not stack or stack[-1] >= end:
                stack.append(end)
                out[j] = k
                break
        else:
            lanes.append([end])
            out[j] = len(lanes) - 1
    return out


def chrome_trace(eng: WhatIfEngine, steps: Sequence[int] | None = None) -> dict[str, Any]:
    """A Chrome trace-event JSON document (Perfetto, ``chrome://tracing``) of ``steps`` (default:
    the worst and a typical step; at most ``MAX_TIMELINE_STEPS``).

    One process per worker, named ``dp D · pp P · rank R · host H``, with one thread per run:
    ``actual`` (the recorded ops) and ``straggler-free (simulated)``. Ops of one run that overlap
    without nesting spill onto extra lanes of that run (``actual · lane 2``, ...; see
    :func:`assign_lanes`). The chosen steps are laid out one after another and both runs of a step
    start at the same instant; timestamps are whole microseconds. Critical-path ops carry the
    category ``critical-path`` and ``args.critical``/``args.critical_share``. Flow events on the
    simulated run link, for every group instance (a P2P pair, a collective on one DP rank or
    across all of them), the member the group waited for (the last to start) to each other
    member. Size: 2 slices per op of the chosen steps, at most one flow (two events) per op, plus
    6 metadata events per worker and 2 per extra lane.
    """
    t = eng.template
    idx = step_indices(eng, steps)
    if len(idx) > MAX_TIMELINE_STEPS:
        raise TraceError(f"{len(idx)} steps asked for; a timeline holds at most {MAX_TIMELINE_STEPS} steps")
    lab = _Labels.of(eng)
    runs = {"actual": recorded_run(eng), "straggler-free": straggler_free_run(eng)}
    paths = {"actual": replay_run(eng), "straggler-free": runs["straggler-free"]}
    dp = t.dp

    def pid(d: int, s: int) -> int:
        return s * dp + d + 1

    ideal_t = float(eng.ideal_step_time)
    worst, typical = choose_steps(eng)
    offsets: list[float] = []
    laid_out: list[dict[str, Any]] = []
    offset = 0.0
    for i in idx:
        offsets.append(offset)
        laid_out.append(
            {
                "step": eng.steps[i],
                "offset_us": _us(offset),
                "actual_step_time_s": float(eng.actual_step_times[i]),
                "straggler_free_step_time_s": ideal_t,
                "role": "worst"
                if eng.steps[i] == worst
                else ("typical" if eng.steps[i] == typical else "chosen"),
            }
        )
        offset += max(float(eng.actual_step_times[i]), ideal_t) * STEP_SPACING

    slices, cells = _slice_events(eng, lab, runs, paths, idx, offsets, pid)
    lanes = assign_lanes(
        [
            (e["pid"] * 10 + run_no, e["ts"], e["ts"] + e["dur"])
            for e, (run_no, *_) in zip(slices, cells, strict=True)
        ]
    )
    lane_of: dict[tuple[int, int, int, int], int] = {}
    used: set[tuple[int, int, int]] = set()
    for e, (run_no, v, d, i), k in zip(slices, cells, lanes, strict=True):
        e["tid"] = lane_tid(run_no, k)
        lane_of[(run_no, v, d, i)] = e["tid"]
        used.add((e["pid"], run_no, k))
    events = _metadata_events(t, lab, pid, used)
    events.extend(slices)
    flow_id = 0
    for i, off in zip(idx, offsets, strict=True):
        flow_id = _flows(
            t,
            runs["straggler-free"],
            i,
            off,
            pid,
            lambda v, d, i=i: lane_of[(2, v, d, i)],
            events,
            flow_id,
            eng.steps[i],
        )
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "generator": "straggler-lens timeline",
            "job": eng.trace.meta.trial_name,
            "steps": laid_out,
            "threads": {
                "actual": "recorded ops: thread 10, extra lanes 11, 12, ...",
                "straggler-free": "simulated ops: thread 20, extra lanes 21, 22, ...",
            },
        },
    }


def _metadata_events(
    t: Template, lab: _Labels, pid: Any, used: set[tuple[int, int, int]]
) -> list[dict[str, Any]]:
    """Per worker its process name and sort order, and a name and sort order for every thread:
    lane 0 of both runs always, and each extra lane a run spilled onto."""
    events: list[dict[str, Any]] = []
    for s in range(t.pp):
        for d in range(t.dp):
            p = pid(d, s)
            name = f"dp {d} · pp {s} · rank {lab.rank(d, s)} · host {lab.host(d, s)}"
            events.append({"ph": "M", "pid": p, "name": "process_name", "args": {"name": name}})
            events.append({"ph": "M", "pid": p, "name": "process_sort_index", "args": {"sort_index": p}})
            for run_no, _key, label in RUNS:
                for k in sorted({0} | {k for (q, r, k) in used if q == p and r == run_no}):
                    tid = lane_tid(run_no, k)
                    tname = label if k == 0 else f"{label} · lane {k + 1}"
                    events.append(
                        {"ph": "M", "pid": p, "tid": tid, "name": "thread_name", "args": {"name": tname}}
                    )
                    events.append(
                        {
                            "ph": "M",
                            "pid": p,
                            "tid": tid,
                            "name": "thread_sort_index",
                            "args": {"sort_index": tid},
                        }
                    )
    return events


def _slice_events(
    eng: WhatIfEngine,
    lab: _Labels,
    runs: dict[str, RunTimes],
    paths: dict[str, RunTimes],
    idx: list[int],
    offsets: list[float],
    pid: Any,
) -> tuple[list[dict[str, Any]], list[tuple[int, int, int, int]]]:
    """One ``X`` slice per op, DP rank, chosen step and run (without ``tid``: lanes come after),
    and the ``(run number, node, dp, step index)`` cell of each."""
    t = eng.template
    rows = t.dense(np.arange(len(eng.trace.ops), dtype=np.float64), fill=-1).astype(np.int64)
    mb = eng.trace.ops.mb_id
    slices: list[dict[str, Any]] = []
    cells: list[tuple[int, int, int, int]] = []
    for i, offset in zip(idx, offsets, strict=True):
        step = eng.steps[i]
        on_path = {
            name: dict(((v, d), x) for v, d, x in _path_shares(t, run, i)) for name, run in paths.items()
        }
        for v in range(t.n_nodes):
            s = int(t.stage[v])
            kind = "compute" if _IS_COMPUTE[int(t.optype[v])] else "communication"
            g = int(t.group[v])
            for d in range(t.dp):
                row = int(rows[v, d, i])
                base_args: dict[str, Any] = {
                    "step": step,
                    "op": t.name(v),
                    "dp_rank": d,
                    "pp_rank": s,
                    "rank": lab.rank(d, s),
                    "seq_id": int(t.seq[v]),
                    "mb_id": int(mb[row]) if row >= 0 else -1,
                    "group": g,
                }
                for run_no, name, _label in RUNS:
                    run = runs[name]
                    st, en, gs = (_cell(a, v, d, i) for a in (run.start, run.end, run.group_start))
                    share = on_path[name].get((v, d))
                    args = {
                        **base_args,
                        "start_s": st,
                        "duration_s": en - st,
                        "wait_s": max(0.0, min(gs, en) - st) if g >= 0 else 0.0,
                        "launch_delay_s": _cell(run.launch, v, d, i),
                        "critical": share is not None,
                    }
                    if share is not None:
                        args["critical_share"] = share
                    ts = _us(offset + st)
                    slices.append(
                        {
                            "ph": "X",
                            "pid": pid(d, s),
                            "name": OPTYPES[int(t.optype[v])],
                            "cat": kind + (",critical-path" if share is not None else ""),
                            "ts": ts,
                            "dur": max(0, _us(offset + en) - ts),
                            "args": args,
                        }
                    )
                    cells.append((run_no, v, d, i))
    return slices, cells


def _cell(a: Array, v: int, d: int, i: int) -> float:
    return float(a[v, d if a.shape[1] > 1 else 0, i if a.shape[2] > 1 else 0])


def _path_shares(t: Template, run: RunTimes, i: int) -> list[tuple[int, int, float]]:
    """(node, dp, share) of the ops on the critical path of step index ``i`` (a launch gap is not
    an op: the op launched late is on the path through its own segment)."""

    def col(a: Array) -> Array:
        return a[:, :, i] if a.shape[2] > 1 else a[:, :, 0]

    cells = path_cells(t, col(run.start), col(run.end), col(run.launch), same_worker=run.program_order)
    length = max(c[4] for c in cells) if cells else 0.0
    shares: dict[tuple[int, int], float] = {}
    for v, d, kind, lo, hi in cells:
        if kind == "launch-gap":
            continue
        shares[(v, d)] = shares.get((v, d), 0.0) + ((hi - lo) / length if length > 0 else 0.0)
    return [(v, d, x) for (v, d), x in shares.items()]


def group_instances(t: Template, g: int) -> list[list[tuple[int, int]]]:
    """The (node, dp) cells that finish together for group ``g`` in one step: one instance per DP
    rank, or one across every DP rank when the group is DP-synchronised."""
    members = t.groups[g]
    if t.group_dp_sync[g]:
        return [[(m, d) for m in members for d in range(t.dp)]]
    return [[(m, d) for m in members] for d in range(t.dp)]


def _flows(
    t: Template,
    run: RunTimes,
    i: int,
    offset: float,
    pid: Any,
    tid: Any,
    events: list[dict[str, Any]],
    flow_id: int,
    step: int,
) -> int:
    """Append the flow events of step index ``i`` on the simulated run; returns the next id.

    ``tid(node, dp)`` is the lane holding that cell's slice; a flow's start sits at the releasing
    member's start and its finish at the group start, inside the other member's slice."""
    for g in range(len(t.groups)):
        for cells in group_instances(t, g):
            if len(cells) < 2:
                continue
            starts = [_cell(run.start, v, d, i) for v, d in cells]
            src = int(np.argmax(starts))
            sv, sd = cells[src]
            eff = max(starts)
            p2p = all(OPTYPE_KIND[OPTYPES[int(t.optype[v])]] is OpKind.PP_COMM for v, _ in cells)
            cat = "p2p" if p2p else "collective"
            for j, (v, d) in enumerate(cells):
                if j == src:
                    continue
                ts_lo = _us(offset + _cell(run.start, v, d, i))
                ts_hi = max(ts_lo, _us(offset + _cell(run.end, v, d, i)))
                name = f"{OPTYPES[int(t.optype[sv])]} -> {OPTYPES[int(t.optype[v])]}"
                common = {"name": name, "cat": cat, "id": flow_id, "args": {"step": step, "group": g}}
                events.append(
                    {
                        **common,
                        "ph": "s",
                        "pid": pid(sd, int(t.stage[sv])),
                        "tid": tid(sv, sd),
                        "ts": _us(offset + starts[src]),
                    }
                )
                events.append(
                    {
                        **common,
                        "ph": "f",
                        "bp": "e",
                        "pid": pid(d, int(t.stage[v])),
                        "tid": tid(v, d),
                        "ts": min(max(_us(offset + eff), ts_lo), ts_hi),
                    }
                )
                flow_id += 1
    return flow_id


def expected_flow_count(t: Template) -> int:
    """Flows per step from the graph alone: every group instance of m cells gives m - 1 flows."""
    return sum(len(c) - 1 for g in range(len(t.groups)) for c in group_instances(t, g) if len(c) > 1)


def export_size_bound(eng: WhatIfEngine, n_steps: int) -> int:
    """An upper bound on the events of a timeline of ``n_steps`` steps (the size stated in docs)."""
    t = eng.template
    cells = t.n_nodes * t.dp
    return n_steps * (2 * cells + 2 * expected_flow_count(t)) + 6 * t.dp * t.pp + 2 * (2 * n_steps * cells)
