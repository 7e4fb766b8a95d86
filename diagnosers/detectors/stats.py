"""Trace statistics for the detectors, computed once per trace with numpy (no per-op Python loop)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from diagnosers.detectors.base import Deferred, Engine, Probe, TraceStats, cell_ids
from diagnosers.model import OPTYPE_CODE, Trace
from diagnosers.npplain import median, unique
from diagnosers.readers.normalize import dense_ids, reduce_into
from diagnosers.readers.validate import common_keys

FWD = OPTYPE_CODE["forward-compute"]
BWD = OPTYPE_CODE["backward-compute"]
OPT = OPTYPE_CODE["optimizer"]

# A forward op is only counted as paused when its excess over what its backward explains is both
# statistically extreme (robust z) and a real share of a forward; see _forward_excess.
EPS = 5e-5  # the method's timestamp tolerance (METHOD.md A2)
# An op "looks paused" when its unmirrored excess has robust z >= 8 and is >= 20% of a typical op
# (the gc-pause detector's rule, applied to backwards too as the noise control).
OUTLIER_Z = 8.0
OUTLIER_REL = 0.2


def compute_stats(trace: Trace, engine: Engine | None = None) -> TraceStats:
    """Per-worker and per-op statistics the detectors read; ``engine`` adds the what-if probe.

    Each per-row quantity several statistics share (the flat worker and (step, worker) cell of
    every row, op ends, the forward and backward masks) is computed once here."""
    ops, meta = trace.ops, trace.meta
    dp, pp = meta.dp, meta.pp
    steps, si = _step_index(ops.step)
    n_s = len(steps)
    # each row's flat worker d * pp + p (int32, as TraceStats.worker_mask wants it) and its
    # (step, worker) cell (step_index * dp + d) * pp + p (int32 where the cells fit, ``cell_ids``)
    # (in the columns' own int32, no copy of them first)
    worker = (ops.dp_rank * np.int32(pp) + ops.stage).astype(np.int32, copy=False)
    cell = cell_ids(si, worker, dp * pp, n_s)
    size = n_s * dp * pp

    rank_of = _rank_of(worker, ops.rank, dp, pp)

    is_f = ops.optype == FWD
    is_b = ops.optype == BWD
    is_comp = is_f | is_b
    # the per-cell sums read off the engine's dense layout where it holds the rows (node order,
    # not the rows': the last bits may differ), else a bincount over the rows
    compute = engine.cell_sums((FWD, BWD), steps) if engine is not None else None
    if compute is None:
        compute = (
            np.bincount(cell[is_comp], weights=ops.duration[is_comp], minlength=size)
            .astype(np.float64)
            .reshape(n_s, dp, pp)
        )

    step_start = reduce_into(np.minimum, si, ops.start_ts, n_s, np.inf)
    step_end = _step_ends(si, ops.start_ts, ops.duration, n_s)
    step_time = step_end - step_start

    def launch_idle() -> npt.NDArray[np.float64]:
        # read by the dataloader-stall detector only when launch delays slow the job (and by the
        # kernel-level transport view): made on first read, its op ends made again (the same sums)
        # rather than kept alive for it
        return _launch_idle(
            ops.optype, ops.start_ts, ops.duration, cell, si, step_start, size, step_end, steps,
            end=ops.start_ts + ops.duration, is_f=ops.optype == FWD, opened=_opened(trace, steps, size),
        ).reshape(n_s, dp, pp)

    # each op's microbatch: the trace's id, else its position among the worker's ops of its type
    op_mb = np.where(ops.mb_id >= 0, ops.mb_id, ops.seq_id).astype(np.int32, copy=False)
    # (the forward and backward rows handed over, not kept here: the pairing lets them go)
    corr, within, fwd_index, excess, z, typical, bwd_outliers = _forward_backward(
        trace, si, cell=cell, fwd_rows=np.flatnonzero(is_f), bwd_rows=np.flatnonzero(is_b), op_mb=op_mb
    )
    optimizer = engine.cell_sums((OPT,), steps) if engine is not None else None
    if optimizer is None:
        is_opt = ops.optype == OPT
        optimizer = (
            np.bincount(cell[is_opt], weights=ops.duration[is_opt], minlength=size)
            .astype(np.float64)
            .reshape(n_s, dp, pp)
        )
    # the stage means are read by the stage-imbalance finding once it holds: made on first read
    # (their rows found again then, rather than kept alive for it)
    def stage_mean(code: int) -> Deferred[npt.NDArray[np.float64]]:
        return Deferred(lambda: _stage_mean(ops.stage, ops.duration, np.flatnonzero(ops.optype == code), pp))

    stage_fwd_mean, stage_bwd_mean = stage_mean(FWD), stage_mean(BWD)

    probe = Probe(engine) if engine is not None else None
    transfer = probe.original if probe is not None else ops.duration.astype(np.float64)
    stats = TraceStats(
        steps=steps,
        dp=dp,
        pp=pp,
        gpus_per_host=meta.gpus_per_host,
        rank_of=rank_of,
        compute=compute,
        step_time=step_time,
        launch_idle=Deferred(launch_idle),
        fwd_bwd_corr=corr,
        fwd_bwd_corr_within=within,
        optimizer=optimizer,
        fwd_excess=excess,
        fwd_excess_z=z,
        fwd_index=fwd_index,
        fwd_typical=typical,
        bwd_outliers=bwd_outliers,
        stage_fwd_mean=stage_fwd_mean,
        stage_bwd_mean=stage_bwd_mean,
        n_ops=len(ops),
        optype=ops.optype,
        op_dp=ops.dp_rank,
        op_pp=ops.stage,
        op_step_index=si,
        op_gmc=ops.gmc,
        op_mb=op_mb,
        transfer=transfer,
        probe=probe,
        op_start=np.asarray(ops.start_ts, dtype=np.float64),  # read only: no copy
        layers_per_stage=list(meta.layers_per_stage) if meta.layers_per_stage is not None else None,
        microbatches=trace.graph is None,
    )
    worker.flags.writeable = False
    stats._op_worker = worker  # shared: TraceStats.op_worker
    stats._cache["op_cell"] = cell
    cell.flags.writeable = False
    return stats


# rows per chunk of op ends in ``_step_ends`` (2 MB of float64)
_END_CHUNK = 1 << 18


def _step_ends(
    si: npt.NDArray[np.int64], start: npt.NDArray[np.float64], dur: npt.NDArray[np.float64], n_s: int
) -> npt.NDArray[np.float64]:
    """Per step index: the latest op end ``start + dur`` of its rows, ``reduce_into(np.maximum, si,
    start + dur, n_s, -inf)``, taken over chunks of rows so that no row-sized array of ends is
    made (a fresh 15 MB at 1.9M ops): a maximum does not depend on how its values are grouped."""
    out = np.full(n_s, -np.inf)
    for a in range(0, len(si), _END_CHUNK):
        b = a + _END_CHUNK
        np.maximum(out, reduce_into(np.maximum, si[a:b], start[a:b] + dur[a:b], n_s, -np.inf), out=out)
    return out


def _rank_of(
    worker: npt.NDArray[np.int32], rank: npt.NDArray[np.int64], dp: int, pp: int
) -> npt.NDArray[np.int64]:
    """(dp, pp) traced global rank of each worker, -1 if absent: ``rank_of[d, p] = rank`` over the
    rows, whose last write wins. Only the last row of each run of one worker is written (the
    same last rows, so the same values), a few thousand writes instead of one per row."""
    out = np.full(dp * pp, -1, dtype=np.int64)
    if len(worker):
        last = np.r_[np.flatnonzero(worker[1:] != worker[:-1]), len(worker) - 1]
        out[worker[last]] = rank[last]
    return out.reshape(dp, pp)


def _step_index(step: npt.NDArray[np.integer[Any]]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The sorted distinct step ids and each row's position among them (``np.unique`` and
    ``np.searchsorted``); by counting when the ids span a range not much wider than the rows."""
    if len(step) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    lo, hi = int(step.min()), int(step.max())
    if hi - lo > 4 * len(step) + 1024:
        steps = unique(step).astype(np.int64)
        return steps, np.searchsorted(steps, step).astype(np.int64)
    if lo == 0 and step.dtype == np.int64:
        # ids from 0 (every generated job): each row's offset is its id, read from the column
        # itself (read-only) instead of a row-sized copy of it
        offset = step.view(np.int64)
        offset.flags.writeable = False
    else:
        offset = np.asarray(step, dtype=np.int64) - lo  # one pass: the column is int64 already
    present = np.bincount(offset, minlength=hi - lo + 1) > 0
    if present.all():  # consecutive step ids: each row's position is its offset
        return np.arange(lo, hi + 1, dtype=np.int64), offset
    position = np.cumsum(present) - 1
    return np.flatnonzero(present).astype(np.int64) + lo, position[offset]


def _opened(trace: Trace, steps: npt.NDArray[np.int64], size: int) -> npt.NDArray[np.float64] | None:
    """Per (step, worker) cell: when the worker opened the step (the reader's ``opened``, stage 0),
    NaN where unknown; None when the trace's graph states none (span-named traces)."""
    graph = trace.graph
    opened = getattr(graph, "opened", None) if graph is not None else None
    if not opened or not len(steps):
        return None
    out = np.full(size, np.nan)
    per_step = size // len(steps)
    pp = trace.meta.pp
    for (d, sid), t in opened.items():
        k = int(np.searchsorted(steps, sid))
        if k < len(steps) and steps[k] == sid and 0 <= d * pp < per_step:
            out[k * per_step + d * pp] = t
    return out


def _launch_idle(
    optype: npt.NDArray[np.int16],
    start: npt.NDArray[np.float64],
    dur: npt.NDArray[np.float64],
    cell: npt.NDArray[np.signedinteger[Any]],
    si: npt.NDArray[np.int64],
    step_start: npt.NDArray[np.float64],
    size: int,
    step_end: npt.NDArray[np.float64] | None = None,
    steps: npt.NDArray[np.int64] | None = None,
    *,
    end: npt.NDArray[np.float64] | None = None,
    is_f: npt.NDArray[np.bool_] | None = None,
    opened: npt.NDArray[np.float64] | None = None,
) -> npt.NDArray[np.float64]:
    """Per worker-step: time between the step start (or, on a shared time axis, the worker's own
    end of the previous step, when later) and the worker's first forward-compute that no op of
    the worker covers. Communication waits are covered (a recv waiting for its peer is busy
    in the trace), so what remains is host-side idle time: data loading, Python, launch gaps.
    Overlapping ops are counted twice, which can only under-state the idle time. ``end`` (start +
    duration) and ``is_f`` (the forward-compute rows) may be passed when the caller has them.
    ``opened`` (per cell, NaN where unknown): when the worker opened the step; in a step with no
    previous step in the profile (the first profiled one) idle time counts from it when later."""
    if is_f is None:
        is_f = optype == FWD
    if end is None:
        end = start + dur
    first_fwd = reduce_into(np.minimum, cell[is_f], start[is_f], size, np.inf)
    # the tolerance added per cell, then gathered: the same sums as adding it per row
    before = end <= (first_fwd + EPS)[cell]
    covered = np.bincount(cell[before], weights=dur[before], minlength=size)
    n_s = len(step_start)
    per_step = size // n_s if n_s else 0
    cell_step = np.arange(size) // per_step if n_s else np.zeros(0, dtype=np.int64)
    begin = step_start[cell_step] if n_s else np.zeros(0)
    if n_s >= 2 and steps is not None and step_end is not None:
        # A worker cannot start a step before it has finished its part of the previous one: in a
        # pipeline the first stage ends step N-1 (its last backward, the DP reduction) well after
        # the last stage has begun step N. On a shared time axis (absolute timestamps: each step
        # starts later than the one before), count idle time from the worker's own previous end.
        ends = reduce_into(np.maximum, cell, end, size, -np.inf)
        # Each step starts after the previous one has run at least half its own span (a step's span
        # exceeds the gap to the next start by the pipeline's overlap only), or half the typical
        # span: judged per step, a step much shorter than the others does not hide the axis.
        span = step_end - step_start
        shared_axis = bool(np.all(np.diff(step_start) > 0.5 * np.minimum(span[:-1], median(span))))
        if shared_axis:
            prev = np.full(size, -np.inf)
            consecutive = np.r_[False, np.diff(steps) == 1]
            idx = np.flatnonzero(consecutive[cell_step])
            prev[idx] = ends[idx - per_step]
            begin = np.maximum(begin, np.where(np.isfinite(prev), prev, begin))
            if opened is not None:
                # No previous step end in the profile to count from: the time before the worker
                # opened its first profiled step is its unprofiled previous step or the
                # profiler's own start-up, no part of this step's wait for input (a dataloader
                # fetch runs inside the step, after it opens).
                first = ~consecutive[cell_step] & np.isfinite(opened)
                begin = np.where(first, np.maximum(begin, np.where(first, opened, begin)), begin)
    span = np.where(np.isfinite(first_fwd), first_fwd - begin, 0.0)
    idle = np.clip(span - covered, 0.0, None)
    return idle.astype(np.float64)


def _forward_backward(
    trace: Trace,
    si: npt.NDArray[np.int64],
    *,
    cell: npt.NDArray[np.signedinteger[Any]] | None = None,
    fwd_rows: npt.NDArray[np.intp] | None = None,
    bwd_rows: npt.NDArray[np.intp] | None = None,
    op_mb: npt.NDArray[np.int32] | None = None,
) -> tuple[
    Deferred[dict[int, float]],
    dict[int, float],
    npt.NDArray[np.int64],
    npt.NDArray[np.float64],
    npt.NDArray[np.float64],
    npt.NDArray[np.float64],
    Deferred[int],
]:
    """Pair each forward with the backward of the same microbatch and chunk on the same worker.

    Returns the per-stage correlation of the normalised durations (each divided by the median of its
    (stage, chunk) group), and for each paired forward its "unmirrored excess" in seconds:
    ``fwd - typical_fwd * max(1, bwd / typical_bwd)`` — a longer microbatch lengthens both passes
    (sequence length), a pause inside the forward lengthens only the forward (GC) — with a robust
    z-score of that excess over the stage's forwards. Also the number of backwards that look the
    same way round (excess not mirrored by their forward, robust z >= 8 and >= 20% of a typical
    backward): the control for symmetric heavy-tailed op noise, which a forward-only pause is not.
    The stage-level correlations and that count come as :class:`Deferred` (made on first read).

    ``cell`` (each row's (step index, dp, pp) cell, ``(si * dp + dp_rank) * pp + stage``), the
    forward / backward row indices and ``op_mb`` (each row's ``mb_id``, else its ``seq_id``) may
    be passed when the caller has them.
    """
    ops, meta = trace.ops, trace.meta
    dp, pp = meta.dp, meta.pp
    if cell is None:
        cell = (si * dp + ops.dp_rank) * pp + ops.stage
    gmax = int(max(ops.gmc.max(initial=0), 0)) + 2
    mbmax = int(max(ops.mb_id.max(initial=0), 0)) + 2
    seqmax = int(max(ops.seq_id.max(initial=0), 0)) + 2

    n_mb = max(mbmax, seqmax)

    def microbatch(rows: npt.NDArray[np.int64]) -> npt.NDArray[np.integer[Any]]:
        # in the column's own width: the keys it is added to are int64 (the same sums)
        if op_mb is not None:
            return op_mb[rows]
        mb_id = ops.mb_id[rows]  # gathered once per column: the rows are a fraction of the trace
        return np.where(mb_id >= 0, mb_id, ops.seq_id[rows])

    # Every per-pair array is let go once read (the keys, the pairs' indices, the durations): the
    # pairing's peak of live memory, which it first touches, is what it costs beyond its passes.
    fi = np.flatnonzero(ops.optype == FWD) if fwd_rows is None else fwd_rows
    bi = np.flatnonzero(ops.optype == BWD) if bwd_rows is None else bwd_rows
    del fwd_rows, bwd_rows
    kf, kb, space = _pairing_keys(ops, si, cell, fi, bi, microbatch, dp, pp, gmax, n_mb)
    a, b = common_keys(kf, kb, space)  # np.intersect1d's pairs, by key
    del kf, kb
    fi, bi = fi[a].astype(np.int64, copy=False), bi[b]  # (a gather is a fresh array already)
    del a, b
    pr = _pair_durations(ops, fi, bi, gmax)
    fd, bd, tf, stage, by_stage = pr.fd, pr.bd, pr.tf, pr.stage, pr.by_stage
    # Within one worker-step and chunk: a persistently slow worker scales all its microbatches
    # alike, so normalising by the worker's own median removes it and leaves per-microbatch cost.
    # (each per-pair array below is made in one fresh array and updated in place: the same
    # operations, in the same order, on the same values as the expressions they replace, and
    # a product's operands commute in IEEE arithmetic)
    wgroup = cell[fi].astype(np.int64, copy=False)  # cell * gmax + gmc + 1 (int64, a fresh array)
    wgroup *= gmax
    wgroup += ops.gmc[fi]
    wgroup += 1
    by_worker = _median_by(wgroup)
    xf, xb = _over_median(fd, by_worker(fd)), _over_median(bd, by_worker(bd))
    del wgroup, by_worker
    excess = pr.nb()  # fd - tf * max(1, nb)
    np.maximum(1.0, excess, out=excess)
    excess *= tf
    np.subtract(fd, excess, out=excess)
    del pr, fd, bd
    med = by_stage(excess)
    dev = excess - med
    mad = by_stage(np.abs(dev, out=dev))
    # Floor the spread at 1% of a typical forward: on a noiseless trace the MAD is 0.
    sigma = np.maximum(np.multiply(mad, 1.4826, out=mad), 0.01 * tf, out=mad)
    z = np.subtract(excess, med, out=dev)
    z /= sigma
    del med, mad, sigma
    (within,) = _stage_correlations(stage, _clean(excess, z, tf), pp, (xf, xb))
    del stage, by_stage, xf, xb

    # The stage-level correlations (the sequence-length finding's evidence) and the backward
    # outliers (the GC-pause finding's control) are read only when those detectors match: made on
    # first read, the pairs' durations and medians made again from the paired rows (the same
    # values: each stage's correlation is computed on its own, apart from the within-worker ones),
    # so that no per-pair array is kept alive for them
    def stage_level() -> dict[int, float]:
        again = _pair_durations(ops, fi, bi, gmax)
        return _stage_correlations(again.stage, _clean(excess, z, tf), pp, (again.nf(), again.nb()))[0]

    def bwd_outliers() -> int:
        again = _pair_durations(ops, fi, bi, gmax)
        bd, tb = again.bd, again.tb()
        b_excess = bd - tb * np.maximum(1.0, again.nf())
        b_med = again.by_stage(b_excess)
        b_mad = again.by_stage(np.abs(b_excess - b_med))
        b_z = (b_excess - b_med) / np.maximum(1.4826 * b_mad, 0.01 * tb)
        return int(((b_z >= OUTLIER_Z) & (b_excess >= OUTLIER_REL * tb)).sum())

    return Deferred(stage_level), within, fi, excess, z, tf, Deferred(bwd_outliers)


def _over_median(
    values: npt.NDArray[np.float64], median: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]:
    """``np.divide(values, median, out=np.ones_like(values), where=median > 0)``, written into
    ``median`` (a fresh array the caller gives up): each value over its group's median, 1 where
    that median is not positive."""
    positive = median > 0
    np.divide(values, median, out=median, where=positive)
    median[~positive] = 1.0
    return median


def _clean(
    excess: npt.NDArray[np.float64], z: npt.NDArray[np.float64], typical: npt.NDArray[np.float64]
) -> npt.NDArray[np.bool_]:
    """The paired forwards that do not look paused (the gc-pause rule): the correlations leave the
    others out, as a pause inside a forward is no data-dependent cost and would hide a
    sequence-length imbalance beside it."""
    return ~((z >= OUTLIER_Z) & (excess >= OUTLIER_REL * typical))


class _Pairs(NamedTuple):
    """Per paired forward/backward: both durations, the forward's stage, the forwards' (stage,
    chunk) group median ``tf``, the (stage, chunk) and the per-stage median functions (one when
    chunks are stages); the backwards' median ``tb`` and each duration over its median (``nf``,
    ``nb``) are made when asked for (fresh arrays, one call each), so that no reader holds more
    of them than it reads."""

    fd: npt.NDArray[np.float64]
    bd: npt.NDArray[np.float64]
    stage: npt.NDArray[np.int64]
    tf: npt.NDArray[np.float64]
    by_chunk: Callable[[npt.NDArray[np.float64]], npt.NDArray[np.float64]]
    by_stage: Callable[[npt.NDArray[np.float64]], npt.NDArray[np.float64]]

    def tb(self) -> npt.NDArray[np.float64]:
        return self.by_chunk(self.bd)

    def nf(self) -> npt.NDArray[np.float64]:
        return np.divide(self.fd, self.tf, out=np.ones_like(self.fd), where=self.tf > 0)

    def nb(self) -> npt.NDArray[np.float64]:
        tb = self.tb()
        return np.divide(self.bd, tb, out=np.ones_like(self.bd), where=tb > 0)


def _pair_durations(ops: Any, fi: npt.NDArray[np.int64], bi: npt.NDArray[np.intp], gmax: int) -> _Pairs:
    """The :class:`_Pairs` of the forward rows ``fi`` and their backward rows ``bi``."""
    fd, bd = ops.duration[fi], ops.duration[bi]
    stage = ops.stage[fi].astype(np.int64)
    group = _pair_ids(stage, ops.gmc[fi], gmax)  # stage * gmax + gmc + 1
    by_chunk = _median_by(group)
    tf = by_chunk(fd)
    # one chunk per stage (every non-interleaved job): the (stage, chunk) groups are the stages,
    # so their grouping serves the stage medians too (as many distinct groups as stages)
    one_chunk = np.count_nonzero(np.bincount(group)) == np.count_nonzero(np.bincount(stage))
    by_stage = by_chunk if one_chunk else _median_by(stage)
    return _Pairs(fd, bd, stage, tf, by_chunk, by_stage)


def _pairing_keys(
    ops: Any,
    si: npt.NDArray[np.int64],
    cell: npt.NDArray[np.signedinteger[Any]],
    fi: npt.NDArray[np.intp],
    bi: npt.NDArray[np.intp],
    microbatch: Callable[[npt.NDArray[np.int64]], npt.NDArray[np.integer[Any]]],
    dp: int,
    pp: int,
    gmax: int,
    n_mb: int,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], int]:
    """Keys that pair each forward with its backward (same step, worker, chunk and microbatch),
    for the forward rows ``fi`` and backward rows ``bi``, and the size of their key space.

    The plain key is ``((cell * gmax + gmc + 1) * n_mb + mb)``: its space holds the stage twice
    (in the cell and, as the global chunk id, in ``gmc``), pp + 1 times more slots than keys on a
    15M-op job, which sends the pairing to a sort of every key. The (stage, chunk) pairs present
    are numbered in their own order instead, ``((step_index * dp + dp_rank) * n_chunks + chunk) *
    n_mb + mb``: the same keys up to an order-preserving renaming (so the same pairs, in the same
    order), in a space about the size of the keys. Rows with a stage or chunk id out of range keep
    the plain keys."""
    stage_f, stage_b = ops.stage[fi], ops.stage[bi]
    g_f, g_b = ops.gmc[fi], ops.gmc[bi]  # the chunk ids, before their + 1
    n_pairs = pp * gmax
    # the range tests on the gathered columns in their own width (the + 1 of the chunk ids moved
    # to the bound): the same verdicts as on their int64 copies
    ok = all(len(x) == 0 or (int(x.min()) >= lo and int(x.max()) < top)
             for x, lo, top in ((stage_f, 0, pp), (stage_b, 0, pp), (g_f, -1, gmax - 1), (g_b, -1, gmax - 1)))
    if not ok:
        space = len(ops) and int(si.max(initial=0) + 1) * dp * pp * gmax * n_mb
        kf = (cell[fi].astype(np.int64) * gmax + (g_f.astype(np.int64) + 1)) * n_mb + microbatch(fi)
        kb = (cell[bi].astype(np.int64) * gmax + (g_b.astype(np.int64) + 1)) * n_mb + microbatch(bi)
        return kf, kb, int(space)
    # In range, each (stage, chunk) pair ``stage * gmax + gmc + 1`` lies in [0, pp * gmax) and
    # each key below ``space``: every step below is integer arithmetic on int64 arrays updated in
    # place (the same values as the expressions written out, without their temporaries).
    pair_f, pair_b = _pair_ids(stage_f, g_f, gmax), _pair_ids(stage_b, g_b, gmax)
    present = (np.bincount(pair_f, minlength=n_pairs) > 0) | (np.bincount(pair_b, minlength=n_pairs) > 0)
    chunk = np.cumsum(present) - 1  # (stage, chunk) pair -> its number among the present ones
    n_chunks = int(present.sum())

    def keys(rows: npt.NDArray[np.intp], pair: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        # ((cell // pp) * n_chunks + chunk[pair]) * n_mb + microbatch, in one int64 array
        k = cell[rows].astype(np.int64, copy=False)  # a gather: a fresh array
        k //= pp
        k *= n_chunks
        k += chunk[pair]
        k *= n_mb
        k += microbatch(rows)
        return k

    kf, kb = keys(fi, pair_f), keys(bi, pair_b)
    space = len(ops) and int(si.max(initial=0) + 1) * dp * n_chunks * n_mb
    return kf, kb, int(space)


def _pair_ids(
    stage: npt.NDArray[np.integer[Any]], gmc: npt.NDArray[np.integer[Any]], gmax: int
) -> npt.NDArray[np.int64]:
    """Each row's (stage, chunk) pair ``stage * gmax + gmc + 1`` as int64, made in one array
    (the same integers as the expression on int64 copies of both columns)."""
    out = stage.astype(np.int64)
    out *= gmax
    out += gmc
    out += 1
    return out


def _stage_correlations(
    stage: npt.NDArray[np.int64],
    keep: npt.NDArray[np.bool_],
    pp: int,
    *pairs: tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]],
) -> tuple[dict[int, float], ...]:
    """Per pair (a, b) of value arrays: stage -> ``np.corrcoef(a[m], b[m])[0, 1]`` with ``m`` the
    kept rows of that stage, for stages with at least 3 such rows and neither side constant.

    The rows of each stage are found once, by a stable sort on the stage (ascending rows within
    a stage, so the values come in the order ``a[(stage == s) & keep]`` gives them) instead of
    a boolean scan of every row per stage and array. Stage ids that fit 16 bits are sorted as
    such: numpy's stable sort of 16-bit integers is a radix sort (linear), of int64 a merge sort,
    and a stable sort has only one result."""
    small = len(stage) > 0 and int(stage.min()) >= 0 and int(stage.max()) < 1 << 16
    order = np.argsort(stage.astype(np.uint16) if small else stage, kind="stable")
    bounds = np.searchsorted(stage[order], np.arange(pp + 1))
    out: tuple[dict[int, float], ...] = tuple({} for _ in pairs)
    for s in range(pp):
        rows = order[bounds[s] : bounds[s + 1]]
        rows = rows[keep[rows]]
        if len(rows) < 3:
            continue
        for (a, b), found in zip(pairs, out, strict=True):
            x, y = a[rows], b[rows]
            if x.std() > 0 and y.std() > 0:
                found[s] = float(np.corrcoef(x, y)[0, 1])
    return out


def _stage_mean(
    stage: npt.NDArray[np.int32], values: npt.NDArray[np.float64], rows: npt.NDArray[np.intp], pp: int
) -> npt.NDArray[np.float64]:
    """Per stage: the mean of ``values`` over ``rows`` (ascending row indices) on that stage, 0 for
    a stage without any; the rows' stages gathered once for both sums."""
    at = stage[rows]
    total = np.bincount(at, weights=values[rows], minlength=pp)[:pp]
    count = np.bincount(at, minlength=pp)[:pp]
    return np.divide(total, count, out=np.zeros(pp), where=count > 0)


def _group_median(group: npt.NDArray[np.int64], values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Median of ``values`` within each group, broadcast back to every element (see :func:`_median_by`)."""
    return _median_by(group)(values)


def _equal_runs(group: npt.NDArray[np.int64]) -> int:
    """The common length of the runs of equal ids in ``group`` when every id forms one run and all
    runs are equally long (rows stored group by group), else 0."""
    starts = np.flatnonzero(group[1:] != group[:-1]) + 1
    n_runs = len(starts) + 1
    if len(group) % n_runs:
        return 0
    size = len(group) // n_runs
    if len(starts) and not (np.all(np.diff(starts) == size) and starts[0] == size):
        return 0
    heads = group[::size]
    return size if len(unique(heads)) == n_runs else 0


def _partition_own(a: npt.NDArray[np.float64], kth: int, axis: int) -> npt.NDArray[np.float64]:
    """``np.partition`` of an array the caller gives up: partitioned in place, no copy."""
    a.partition(kth, axis=axis)
    return a


def _middle_mean(
    partition: Callable[..., npt.NDArray[np.float64]], rows: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]:
    """Per row of ``rows`` (m, size): the mean of its two middle values (its one middle value for
    an odd size), the median a partition at both middle positions gives. One partition point
    only, the upper middle: every value before it is no larger, so the lower middle is their
    maximum, the same order statistic (NaNs, sorted last by both, reach the maximum exactly when
    they reach the lower middle). ``partition``: ``np.partition`` (a copy) or ``_partition_own``."""
    size = rows.shape[1]
    lo, hi = (size - 1) // 2, size // 2
    mid = partition(rows, hi, axis=1)
    upper = mid[:, hi]
    lower = mid[:, :hi].max(axis=1) if lo < hi else upper
    return (lower + upper) / 2


def _median_by(
    group: npt.NDArray[np.int64],
) -> Callable[[npt.NDArray[np.float64]], npt.NDArray[np.float64]]:
    """A function giving, for values aligned with ``group``, the median within each group broadcast
    back to every element; the grouping work is done once for every values array.

    Groups of equal size take a per-group partition (linear). Otherwise sorted by value once, then
    stably by group: with at most 65,536 groups the group sort is a radix sort on 16-bit ids
    (linear), where a lexsort of both keys was two comparison sorts."""
    if len(group) == 0:
        return lambda values: values.copy()
    runs = _equal_runs(group)
    if runs:
        # each group one run of rows of the same length (a worker-step's microbatches, stored
        # together): the runs are the matrix's rows as they lie, no grouping sort and no gathers
        def in_place(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
            n = len(values) // runs
            return np.repeat(_middle_mean(np.partition, values.reshape(n, runs)), runs)

        return in_place
    ids, inv = dense_ids(group)
    sizes = np.bincount(inv, minlength=len(ids))
    key = inv.astype(np.uint16) if len(ids) <= 1 << 16 else inv
    if sizes.min() == sizes.max():
        # Equal groups (every stage, worker-step and chunk runs the same microbatches): one row
        # per group, and a partition finds the two middle values in linear time, the same
        # values a sort would put there.
        by_group = np.argsort(key, kind="stable")
        size = int(sizes[0])

        def equal(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
            mid = values[by_group].reshape(len(ids), size)  # a gather: partitioned in place
            return _middle_mean(_partition_own, mid)[inv]

        return equal
    starts = np.cumsum(sizes) - sizes

    def unequal(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        by_value = np.argsort(values)  # the order among equal values does not change a median
        if len(ids) <= 1 << 16:
            order = by_value[np.argsort(key[by_value], kind="stable")]
        else:  # group, then rank by value: unique keys, so any sort gives the same order
            rank = np.empty(len(values), dtype=np.int64)
            rank[by_value] = np.arange(len(values))
            order = np.argsort(inv * len(values) + rank)
        v = values[order]
        med_per_group = (v[starts + (sizes - 1) // 2] + v[starts + sizes // 2]) / 2
        return med_per_group[inv]

    return unequal
