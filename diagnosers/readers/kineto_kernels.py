"""Kernel-level job model for PyTorch profiler traces without Megatron / NDTimeline span names.

Chosen by :mod:`diagnosers.readers.kineto` when no named spans exist (plain DDP, FSDP, DLRM-style
jobs). Per rank and profiled step (``ProfilerStep#N``) the trace is read as an ordered list of
*items* in launch order (CPU launch time, joined to the GPU activity on ``correlation``):

- a **compute segment**: a maximal run of non-communication GPU work (kernels, memcpy, memset, on
  any non-NCCL stream) between two collective launches, a phase change (forward / backward /
  optimizer, from ``## backward ##`` / autograd-engine / ``Optimizer.step#`` evidence) or a stream
  wait that consumes a collective's result. Its op type (the pool its ideal duration is taken
  over) is the phase plus the multiset of kernel names and their enclosing CPU ops;
- a **collective**: one NCCL kernel of either naming era (``ncclKernel_*`` <= 2.18,
  ``ncclDevKernel_*`` >= 2.19, ``ncclSymk*``), typed by ``Collective name`` when recorded and by
  the kernel name otherwise, keyed by ``Process Group Name`` and message size where recorded.
  Collectives are matched across ranks by (process group, ``Seq``) where the trace records c10d's
  sequence numbers (on the kernel or its ``record_param_comms`` op), otherwise by their order
  within their group (process group, or stream when none is recorded); the item structure must
  then agree on every rank and step (checked).

CPU / gloo traces (no GPU activity) use the same model: compute segments are runs of CPU ops,
collectives are the ``gloo:*`` / ``nccl:*`` annotations (launched at their ``c10d::*`` enqueue op).
The enqueue call is a communication node of its own on the calling thread, not synchronised
across ranks (it hands the work to the backend's thread and waits for no peer): its time is its
own duration, not a transfer.

Dependencies (one graph per step, the same for every rank, as in the method):

- segments form one chain (the rank's compute lane); collectives on one comm stream form a FIFO;
- a collective waits for the segment launched before it (c10d makes the comm stream wait on the
  compute stream at launch);
- a segment waits for the collectives whose results it consumes: those launched before a stream
  wait (``cudaStreamWaitEvent``, not the one directly before a collective launch) or a
  synchronisation (``cudaStreamSynchronize`` / ``cudaDeviceSynchronize`` / ``cudaEventSynchronize``)
  that precedes its first launch, and every pending collective at the optimizer's first segment;
  an edge is kept only where the collective ended before the segment started on every rank/step.

So DDP's bucketed all-reduce runs beside the backward segments (each bucket after the segment that
produced it, the optimizer after all of them) and FSDP's per-unit all-gather / reduce-scatter
overlap compute the same way: overlap, not a serial chain. A collective's transfer time is its end
minus the latest start of any rank's member (METHOD.md A3).

CPU launch gaps: a segment's time runs from when it could start (its lane predecessor's end or its
consumed collectives' end) to its last activity's end, extended to the next collective's launch
when the CPU launches that later; GPU idle inside it (waiting for the CPU to launch) is its
host-bound time, reported in the notes. So a slow CPU (GC pause, Python overhead) shows up as a
long segment on its rank, and time before a rank's first launch in a step (a dataloader stall)
stays unexplained launch delay, as the method treats it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from diagnosers.kernel_graph import ExplicitGraph
from diagnosers.model import OPTYPE_CODE, TraceError

KERNEL_MODEL = "kernel-level"
COMM_KERNEL_RE = re.compile(r"^(?:nccl|rccl|hccl)|ncclKernel|ncclDevKernel|ncclSymk", re.IGNORECASE)
KERNEL_OP_RE = re.compile(r"nccl(?:Symk)?(?:Dev)?Kernel_([A-Za-z]+)")
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
RUNTIME_CATS = ("cuda_runtime", "cuda_driver", "runtime")
WAIT_NAMES = frozenset({"cudaStreamWaitEvent", "cuStreamWaitEvent", "hipStreamWaitEvent"})
SYNC_NAMES = frozenset({
    "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
    "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize", "hipStreamSynchronize",
    "hipDeviceSynchronize",
})
GLOO_P2P = frozenset({"gloo:send", "gloo:recv", "nccl:send", "nccl:recv"})
COMM_CPU_PREFIXES = ("gloo:", "nccl:")
NON_COMPUTE_CPU_PREFIXES = ("c10d::", "record_param_comms", "ProfilerStep", "gloo:", "nccl:",
                            "Optimizer.", "DistributedDataParallel.", "FullyShardedDataParallel.")
ENQUEUE_PREFIX = "c10d::"
ENQUEUE_GROUP = "cpu enqueue"
# DDP's reducer, after it waits for a bucket's all-reduce (work.wait(), not a profiled op), copies
# the reduced bucket into the gradients: the ops of each such copy consume that all-reduce
DDP_COPY = "torch.distributed.ddp.reducer::copy_bucket_to_grad"
TIME_EPS = 1e-4  # s; a consumed collective may end this much after the consumer starts (clock skew)
NAME_CHARS = 60  # kernel names are cut to this many characters in op-type keys

_PHASE_TYPE = ("forward-compute", "backward-compute", "optimizer")
_FWD, _BWD, _OPT = 0, 1, 2


@dataclass
class Item:
    """One node of one rank's step: a compute segment or a collective, in launch order."""

    coll: bool
    phase: int
    launch: float  # first launch (s, file time)
    last_launch: float
    start: float
    end: float
    busy: float = 0.0
    key: str = ""
    stream: Any = None
    consumes: bool = False  # a consuming stream wait / sync precedes its first launch
    kind: str = ""
    key_fn: Callable[[], str] | None = None  # computes ``key`` when needed (template items only)
    group: str = ""  # collectives: the process group (``Process Group Name``), else its stream / lane
    seq: int | None = None  # collectives: c10d's sequence number in its group, where recorded


@dataclass
class RankSteps:
    """Per profiled step (by index into the file's steps): the rank's items."""

    rank: int
    steps: list[list[Item]] = field(default_factory=list)
    entry: list[float] = field(default_factory=list)  # per step: when the rank's step work began
    opened: list[float] = field(default_factory=list)  # per step: when the rank's step annotation began


DATALOADER_RE = re.compile(r"DataLoader|dataloader|_next_data|fetch_batch", re.IGNORECASE)


def _entries(f: Any, out: RankSteps) -> None:
    """Per step, when the rank began it: ``ProfilerStep#N`` start, or the end of a dataloader op
    (``enumerate(DataLoader)#...__next__``) before the first launch, whichever is later. The wait
    for input stays launch delay outside the graph (a dataloader stall); the host work before the
    first launch belongs to the first segment."""
    from diagnosers.readers.kineto import _name_mask

    dl = np.flatnonzero(np.isin(f.cat, ["user_annotation", "cpu_op", "python_function"])
                        & _name_mask(f, lambda x: bool(DATALOADER_RE.search(x))))
    ends = f.ts[dl] + f.dur[dl]
    for si, items in enumerate(out.steps):
        t0 = f.steps[si][1] if f.steps else (items[0].start if items else 0.0)
        first = items[0].launch if items else t0
        before = ends[(ends <= first) & (ends >= t0)]
        out.entry.append(float(max(t0, before.max())) if len(before) else float(t0))
        out.opened.append(float(t0))


def _phase_bounds(f: Any, n_steps: int) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Per step: the first backward and the first optimizer time (inf when absent)."""
    from diagnosers.readers.kineto import (
        AUTOGRAD_PREFIX,
        BACKWARD_ANNOTATION_RE,
        OPTIMIZER_ANNOTATION_RE,
        _name_mask,
        _step_of,
    )

    ann = np.isin(f.cat, ["user_annotation", "cpu_op"])
    bwd = ann & _name_mask(
        f, lambda x: bool(BACKWARD_ANNOTATION_RE.search(x)) or x.startswith(AUTOGRAD_PREFIX))
    opt = ann & _name_mask(f, lambda x: bool(OPTIMIZER_ANNOTATION_RE.search(x)))
    b0 = np.full(n_steps, np.inf)
    o0 = np.full(n_steps, np.inf)
    for mask, arr in ((bwd, b0), (opt, o0)):
        idx = np.flatnonzero(mask)
        st = _step_of(f, f.ts[idx], extend=False)
        ok = st >= 0
        np.minimum.at(arr, st[ok], f.ts[idx][ok])
    return b0, o0


def _coll_kind(name: str, args: dict[str, Any]) -> str:
    op = args.get("Collective name")
    if op is None:
        m = KERNEL_OP_RE.search(name)
        op = m.group(1) if m else name.split("(")[0][:NAME_CHARS]
    return str(op)


P2P_KINDS = frozenset({"send", "recv", "SendRecv", "Send", "Recv"})
RPC_NAME = "record_param_comms"


def _coll_ids(
    f: Any, args: dict[str, Any], ext: float, kind: str, stream: Any, rpc: dict[float, dict[str, Any]],
    ext_all: npt.NDArray[np.float64],
) -> tuple[str, int | None]:
    """(group, sequence number) of one collective kernel.

    The process group is the kernel's ``Process Group Name`` or that of the ``record_param_comms``
    CPU op it was launched from (same ``External id``); without one, the kernel's stream stands for
    its group (each NCCL communicator has its own stream). The sequence number is ``Seq`` (or
    ``seq``) on either record, None where neither has one (older torch, gloo). Point-to-point ops
    count in a sequence of their own, so their group key is marked ``p2p``."""
    rec = args
    if ("Seq" not in args and "seq" not in args) or "Process Group Name" not in args:
        if not rpc and ext == ext:
            _rpc_index(f, ext_all, rpc)
        rec = {**rpc.get(ext, {}), **args}
    pg = rec.get("Process Group Name")
    group = f"pg {pg}" if pg is not None else f"stream {stream}"
    if kind in P2P_KINDS:
        group += " p2p"
    seq = rec.get("Seq", rec.get("seq"))
    return group, (int(seq) if isinstance(seq, int | float) and seq == seq else None)


def _rpc_index(f: Any, ext: npt.NDArray[np.float64], rpc: dict[float, dict[str, Any]]) -> None:
    """``External id`` -> args of the file's ``record_param_comms`` CPU ops (built once per file;
    ``ext`` is the file's External id column)."""
    from diagnosers.readers.kineto import _name_mask

    idx = np.flatnonzero((f.cat == "cpu_op") & _name_mask(f, lambda x: x == RPC_NAME))
    for i in idx:
        if ext[i] == ext[i]:
            rpc[float(ext[i])] = f.args[i]
    rpc.setdefault(float("nan"), {})  # marks the index as built


def _coll_key(kind: str, args: dict[str, Any]) -> str:
    parts = [kind]
    for k in ("Process Group Name", "In msg nelems", "Out msg nelems", "dtype"):
        if k in args:
            parts.append(f"{k}={args[k]}")
    return " ".join(parts)


def gpu_rank_steps(f: Any) -> RankSteps | None:
    """Items of a trace with GPU activity, or None when it has none.

    Vectorised over events: item boundaries are flags over the launch-ordered activities, and
    each item's times are reductions over its run (``np.minimum.reduceat`` ...)."""
    from diagnosers.readers.kineto import _name_mask, _step_of, key_columns

    gpu = np.flatnonzero(np.isin(f.cat, GPU_CATS))
    if not len(gpu):
        return None
    n_steps = max(len(f.steps), 1)
    corr_all, ext_all = key_columns(f.args)
    runtime = np.flatnonzero(np.isin(f.cat, RUNTIME_CATS) & ~np.isnan(corr_all))
    waits = f.ts[np.isin(f.cat, RUNTIME_CATS) & _name_mask(f, lambda x: x in WAIT_NAMES or x in SYNC_NAMES)]
    # launch time and enclosing CPU op of each GPU activity, joined on correlation / External id
    rc = corr_all[runtime]
    ro = np.argsort(rc, kind="stable")
    rc_sorted = rc[ro]
    gc_ = corr_all[gpu]
    pos = np.clip(np.searchsorted(rc_sorted, gc_), 0, max(len(rc_sorted) - 1, 0))
    hit = (len(rc_sorted) > 0) & (rc_sorted[pos] == gc_) if len(rc_sorted) else np.zeros(len(gpu), bool)
    rt = runtime[ro][pos] if len(rc_sorted) else np.zeros(len(gpu), np.int64)
    t_launch = np.where(hit, f.ts[rt], f.ts[gpu])
    launch_ext = np.where(hit, ext_all[rt], np.nan)
    step = _step_of(f, t_launch, extend=False)
    b0, o0 = _phase_bounds(f, n_steps)
    keep = step >= 0
    gpu, t_launch, step, launch_ext = gpu[keep], t_launch[keep], step[keep], launch_ext[keep]
    order = np.lexsort((np.arange(len(gpu)), t_launch))
    gpu, t_launch, step, launch_ext = gpu[order], t_launch[order], step[order], launch_ext[order]
    is_comm = (f.cat[gpu] == "kernel") & _name_mask(f, lambda x: bool(COMM_KERNEL_RE.search(x)))[gpu]
    phase = np.where(t_launch >= o0[step], _OPT, np.where(t_launch >= b0[step], _BWD, _FWD))
    # a wait consumes a result unless the next launch after it is a collective (c10d's
    # comm-stream-waits-for-compute wait)
    consumed = np.zeros(len(gpu), dtype=bool)
    if len(waits) and len(gpu):
        wp = np.searchsorted(t_launch, waits, side="left")
        wp = wp[wp < len(gpu)]
        consumed[wp[~is_comm[wp]]] = True
    t0 = f.ts[gpu]
    t1 = t0 + f.dur[gpu]
    n = len(gpu)
    new = np.ones(n, dtype=bool)
    if n > 1:
        new[1:] = (step[1:] != step[:-1]) | is_comm[1:] | is_comm[:-1] | (phase[1:] != phase[:-1])
    # a segment that follows a collective splits once at its first consuming wait
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], n)
    for a, b in zip(starts, ends, strict=True):
        if is_comm[a] or a == 0 or not is_comm[a - 1] or step[a - 1] != step[a]:
            continue
        inner = np.flatnonzero(consumed[a + 1 : b])
        if len(inner):
            new[a + 1 + inner[0]] = True
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], n)
    seg_t0 = np.minimum.reduceat(t0, starts)
    seg_t1 = np.maximum.reduceat(t1, starts)
    busy = np.add.reduceat(t1 - t0, starts)
    cpu_ops = np.flatnonzero((f.cat == "cpu_op") & ~np.isnan(ext_all))
    out = RankSteps(f.rank, [[] for _ in range(n_steps)])
    op_names: dict[float, str] = {}
    rpc: dict[float, dict[str, Any]] = {}
    for k, (a, b) in enumerate(zip(starts, ends, strict=True)):
        s = int(step[a])
        if is_comm[a]:
            i = gpu[a]
            args = f.args[i]
            kind = _coll_kind(str(f.name[i]), args)
            stream = args.get("stream", f.tid[i])
            group, seq = _coll_ids(f, args, float(launch_ext[a]), kind, stream, rpc, ext_all)
            out.steps[s].append(Item(True, int(phase[a]), float(t_launch[a]), float(t_launch[a]),
                                     float(t0[a]), float(t1[a]), busy=float(t1[a] - t0[a]),
                                     key=_coll_key(kind, args), stream=stream, kind=kind,
                                     group=group, seq=seq))
            continue
        item = Item(False, int(phase[a]), float(t_launch[a]), float(t_launch[b - 1]), float(seg_t0[k]),
                    float(seg_t1[k]), busy=float(busy[k]), consumes=bool(consumed[a]))
        item.key_fn = _segment_key(f, gpu[a:b], launch_ext[a:b], cpu_ops, ext_all, int(phase[a]), op_names)
        out.steps[s].append(item)
    _entries(f, out)
    return out


def _segment_key(
    f: Any, acts: npt.NDArray[np.int64], exts: npt.NDArray[np.float64], cpu_ops: npt.NDArray[np.int64],
    ext_all: npt.NDArray[np.float64], phase: int, cache: dict[float, str],
) -> Callable[[], str]:
    """The op-type key of a segment, computed when asked (only the template's are): phase plus the
    multiset of kernel names with their enclosing CPU op (joined on ``External id``)."""

    def key() -> str:
        if not cache:  # External id -> enclosing CPU op name, built once per file
            for i in cpu_ops[::-1]:
                cache[float(ext_all[i])] = str(f.name[i])
            cache.setdefault(float("nan"), "")
        c: Counter[str] = Counter(
            f"{str(f.name[i])[:NAME_CHARS]}@{cache.get(float(e), '')}"
            for i, e in zip(acts, exts, strict=True))
        return _PHASE_TYPE[phase] + ": " + ", ".join(f"{nm} x{k}" for nm, k in sorted(c.items()))

    return key


def _last_seg_index(items: list[Item]) -> int:
    for k in range(len(items) - 1, -1, -1):
        if not items[k].coll:
            return k
    return -1


def _close(items: list[Item], cur: dict[int, Item | None], names: dict[int, Counter[str]], s: int) -> None:
    seg = cur.get(s)
    if seg is None:
        return
    c = names.get(s, Counter())
    seg.key = _PHASE_TYPE[seg.phase] + ": " + ", ".join(f"{n} x{k}" for n, k in sorted(c.items()))
    items.append(seg)
    cur[s] = None


def cpu_rank_steps(f: Any) -> RankSteps:
    """Items of a CPU-only (gloo) trace: runs of CPU ops and ``gloo:*`` / ``nccl:*`` collectives."""
    from diagnosers.readers.kineto import _name_mask, _step_of

    n_steps = max(len(f.steps), 1)
    b0, o0 = _phase_bounds(f, n_steps)
    cpu = f.cat == "cpu_op"
    comp = np.flatnonzero(cpu & ~_name_mask(f, lambda x: x.startswith(NON_COMPUTE_CPU_PREFIXES)))
    # ops inside the DataLoader's fetch (the dataset's own tensor ops) are input, not training
    # compute: the fetch stays outside the graph, like a GPU job's host time before its first launch
    dl = np.flatnonzero(np.isin(f.cat, ["user_annotation", "cpu_op"])
                        & _name_mask(f, lambda x: bool(DATALOADER_RE.search(x))))
    if len(dl) and len(comp):
        o = np.argsort(f.ts[dl])
        d0, d1 = f.ts[dl][o], (f.ts[dl] + f.dur[dl])[o]
        k = np.searchsorted(d0, f.ts[comp], side="right") - 1
        inside = (k >= 0) & (f.ts[comp] <= d1[np.clip(k, 0, None)])
        comp = comp[~inside]
    coll = np.flatnonzero((f.cat == "user_annotation") & _name_mask(
        f, lambda x: x.startswith(COMM_CPU_PREFIXES) and x not in GLOO_P2P))
    enq = np.flatnonzero(cpu & _name_mask(
        f, lambda x: x.startswith(ENQUEUE_PREFIX) and x not in ("c10d::send", "c10d::recv_")))
    coll = coll[np.argsort(f.ts[coll], kind="stable")]
    enq = enq[np.argsort(f.ts[enq], kind="stable")]
    # only what lies in the profiled steps pairs up (DDP broadcasts at start-up, outside them)
    coll = coll[_step_of(f, f.ts[coll], extend=False) >= 0]
    enq = enq[_step_of(f, f.ts[enq], extend=False) >= 0]
    paired = len(enq) == len(coll) and len(enq) > 0
    # gloo's enqueue can hold the calling thread for milliseconds (on a busy host the woken
    # worker thread takes the CPU): that time is not compute, so ops enclosing an enqueue
    # (autograd's AccumulateGrad hook) leave the segments, and the enqueue becomes a node of its
    # own on the thread. It is no rendezvous: in the recordings of examples/ddp_train.py an
    # enqueue often ends before a peer's begins (every DDP slow-rank job: in every step), so its
    # node is not DP-synchronised (``synced``) and its time is its own. Ops nested inside
    # an enqueue or a collective (c10d's and gloo's own chunk / view / copy, on the calling or the
    # worker thread) belong to that node, not to compute: left in, they would open the next
    # segment before the thread blocks in work.wait() (FSDP2's unshard), so the wait for the
    # peers would be counted as that segment's compute instead of ending the collective it needs
    comp = comp[~_nested_in(f, comp, enq if paired else np.zeros(0, dtype=np.int64), coll)]
    c_launch = f.ts[enq] if paired else f.ts[coll]
    kinds = np.zeros(len(comp), dtype=np.int8)  # 0 compute, 1 enqueue, 2 collective
    ev_t = np.concatenate([f.ts[comp], f.ts[enq] if paired else np.zeros(0), c_launch])
    ev_i = np.concatenate([comp, enq if paired else np.zeros(0, dtype=np.int64), coll]).astype(np.int64)
    n_enq = len(enq) if paired else 0
    ev_k = np.concatenate([kinds, np.ones(n_enq, np.int8), np.full(len(coll), 2, np.int8)])
    ev_c = ev_k > 0
    order = np.lexsort((ev_k, ev_t))
    step = _step_of(f, ev_t, extend=False)
    out = RankSteps(f.rank, [[] for _ in range(n_steps)])
    cur: dict[int, Item | None] = {}
    cur_names: dict[int, Counter[str]] = {}
    last_copy: dict[int, float] = {}  # per step: end of the open segment's last DDP bucket copy
    for j in order:
        s = int(step[j])
        if s < 0:
            continue
        i = ev_i[j]
        tl = float(ev_t[j])
        ph = _OPT if tl >= o0[s] else _BWD if tl >= b0[s] else _FWD
        t0, t1 = float(f.ts[i]), float(f.ts[i] + f.dur[i])
        items = out.steps[s]
        if ev_c[j]:
            _close(items, cur, cur_names, s)
            last_copy.pop(s, None)
            kind = str(f.name[i])
            if ev_k[j] == 1:
                kind = "enqueue " + kind
            # gloo records neither group nor sequence number (torch 2.13): the enqueues and the
            # worker-thread collectives each form one group, matched by order
            items.append(Item(True, ph, tl, tl, t0, t1, busy=t1 - t0, key=kind,
                              stream=("enqueue", f.tid[i]) if ev_k[j] == 1 else f.tid[i], kind=kind,
                              group=ENQUEUE_GROUP if ev_k[j] == 1 else "cpu collective"))
            continue
        seg = cur.get(s)
        name = str(f.name[i])
        copy_end = last_copy.get(s)
        copied = False
        if name.startswith(DDP_COPY):
            last_copy[s] = t1
        elif copy_end is not None and seg is not None and t0 >= copy_end:
            # the first op after a bucket's copies (not nested in one): the next bucket's copy
            # group follows the reducer's wait for that bucket's all-reduce, so it starts a
            # segment of its own that consumes it (left in one segment, the waits for every
            # later bucket were counted as backward compute of the rank that waits)
            _close(items, cur, cur_names, s)
            seg = None
            last_copy.pop(s, None)
            copied = True
        if seg is not None and seg.phase != ph:
            _close(items, cur, cur_names, s)
            seg = None
            last_copy.pop(s, None)
        if seg is None:
            # a CPU collective may block the thread until it completes (gloo's work.wait()): the
            # segment after it may consume it; the timing check in _graph_edges keeps the edge
            # only where the collective ended before the segment began on every rank and step
            seg = Item(False, ph, tl, tl, t0, t1,
                       consumes=bool(items) and (items[-1].coll or copied))
            cur[s] = seg
            cur_names[s] = Counter()
        seg.last_launch = tl
        seg.start = min(seg.start, t0)
        seg.end = max(seg.end, t1)
        seg.busy += t1 - t0
        cur_names[s][str(f.name[i])[:NAME_CHARS]] += 1
    for s in range(n_steps):
        _close(out.steps[s], cur, cur_names, s)
    _entries(f, out)
    return out


def _nested_in(
    f: Any, cand: npt.NDArray[np.int64], enq: npt.NDArray[np.int64], coll: npt.NDArray[np.int64],
) -> npt.NDArray[np.bool_]:
    """Per op of ``cand``: it encloses an enqueue of ``enq``, or lies inside an enqueue or a
    collective of ``coll``, on the same thread (one pass per communication op: a few per step)."""
    off = np.zeros(len(cand), dtype=bool)
    c0, c1, tid = f.ts[cand], f.ts[cand] + f.dur[cand], f.tid[cand]
    for ops, enclose in ((enq, True), (coll, False)):
        for e in ops:
            a, b = f.ts[e], f.ts[e] + f.dur[e]
            hit = (c0 >= a) & (c1 <= b)
            if enclose:
                hit |= (c0 <= a) & (c1 >= b)
            off |= hit & (tid == f.tid[e])
    return off


def _structure(items: list[Item]) -> list[tuple[bool, int, str]]:
    return [(it.coll, it.phase, it.kind) for it in items]


CollId = tuple[str, int]  # (group, sequence number or per-group ordinal)


def _coll_ids_of(items: list[Item], by_seq: bool) -> list[CollId]:
    """Identity of each collective of one rank-step: (group, ``Seq``) when recorded, else (group,
    its ordinal among the step's collectives of that group, in launch order)."""
    seen: Counter[str] = Counter()
    out: list[CollId] = []
    for it in items:
        if it.coll:
            if by_seq and it.seq is not None:
                out.append((it.group, it.seq))
            else:
                out.append((it.group, seen[it.group]))
            seen[it.group] += 1
    return out


def _align_collectives(
    cells: list[tuple[int, int, list[Item]]],
) -> tuple[list[tuple[int, int, list[Item]]], str]:
    """Match collectives across ranks by identity, not by position, and say how.

    With sequence numbers on every collective (``Seq`` of c10d, per process group), a collective is
    (process group, Seq): every rank of a step must hold the same set, else ``TraceError`` names the
    rank, step and the first (group, Seq) it lacks or adds. Across steps a collective is its
    ordinal among its group's sequence numbers. Without them (older torch, gloo), it is (group,
    ordinal in launch order within the group), the group being the process group or the stream.
    Each cell's collective slots are then refilled in the first cell's identity order, so ranks
    that launched two groups' collectives in a different order still pair the same operations;
    the compute segments keep their places (the structure check that follows compares them)."""
    by_seq = all(it.seq is not None for _, _, items in cells for it in items if it.coll)
    if by_seq:
        per_step: dict[int, tuple[int, set[CollId]]] = {}
        for rank, sid, items in cells:
            got = set(_coll_ids_of(items, True))
            if sid not in per_step:
                per_step[sid] = (rank, got)
                continue
            r0, first = per_step[sid]
            if got != first:
                extra = sorted(got - first)
                miss = sorted(first - got)
                g, q = (miss or extra)[0]
                raise TraceError(
                    f"collective {g} Seq {q} is on rank {r0 if miss else rank} but not on rank "
                    f"{rank if miss else r0} in the same step ({len(miss)} missing, {len(extra)} "
                    "extra): the ranks did not run the same collectives in this profiled step",
                    rank=rank, step=sid, op=g)
    ordinal: list[list[CollId]] = []
    for _, _, items in cells:
        ids = _coll_ids_of(items, by_seq)
        if by_seq:  # Seq -> its rank among the group's numbers in this step (same on every rank)
            per_group: dict[str, list[int]] = {}
            for g, q in ids:
                per_group.setdefault(g, []).append(q)
            pos = {g: {q: k for k, q in enumerate(sorted(qs))} for g, qs in per_group.items()}
            ids = [(g, pos[g][q]) for g, q in ids]
        ordinal.append(ids)
    ref_ids = ordinal[0]
    reordered = 0
    out: list[tuple[int, int, list[Item]]] = []
    for (rank, sid, items), ids in zip(cells, ordinal, strict=True):
        if ids == ref_ids or sorted(ids) != sorted(ref_ids):
            out.append((rank, sid, items))  # same order, or a different set (the structure check says where)
            continue
        coll_of = {cid: it for cid, it in zip(ids, (it for it in items if it.coll), strict=True)}
        queue = iter(coll_of[cid] for cid in ref_ids)
        out.append((rank, sid, [next(queue) if it.coll else it for it in items]))
        reordered += 1
    how = ("by (process group, sequence number)" if by_seq
           else "by per-group order (process group or stream; no sequence numbers recorded)")
    if reordered:
        how += f"; {reordered} of {len(cells)} rank-steps launched them in another order than rank " \
               f"{cells[0][0]} step {cells[0][1]}"
    return out, how


def _graph_edges(
    template: list[Item], per_cell: list[list[Item]]
) -> tuple[list[list[int]], list[list[int]]]:
    """(deps, consumed collectives) per node of the common structure, timing-checked on every cell."""
    n = len(template)
    deps: list[list[int]] = [[] for _ in range(n)]
    consumed: list[list[int]] = [[] for _ in range(n)]
    last_seg = -1
    last_on_stream: dict[Any, int] = {}
    pending: list[int] = []
    for k, it in enumerate(template):
        if it.coll:
            if last_seg >= 0:
                deps[k].append(last_seg)
            prev = last_on_stream.get(it.stream)
            if prev is not None:
                deps[k].append(prev)
            last_on_stream[it.stream] = k
            pending.append(k)
            continue
        if last_seg >= 0:
            deps[k].append(last_seg)
        if pending and it.consumes and DDP_COPY in it.key:
            # DDP's bucket copies consume the oldest pending all-reduce, by the reducer's order
            # (its worker thread may close the collective's span a few ms after the main thread
            # woke up on the busy host: the timing check would drop the edge)
            first = next((c for c in pending if template[c].group == "cpu collective"), None)
            if first is not None:
                consumed[k] = [first]
                deps[k].append(first)
                pending = [c for c in pending if c != first]
            last_seg = k
            continue
        if pending and (it.consumes or (it.phase == _OPT and template[last_seg].phase != _OPT)):
            ok = [c for c in pending
                  if all(cell[c].end <= cell[k].start + TIME_EPS for cell in per_cell)]
            consumed[k] = ok
            deps[k].extend(ok)
            pending = [c for c in pending if c not in ok]
        last_seg = k
    return deps, consumed


def build(
    rank_steps: Sequence[RankSteps], step_ids: dict[int, list[int]], coords: dict[int, tuple[int, int]],
    origins: dict[int, float], common: set[int],
) -> tuple[dict[str, list[Any]], ExplicitGraph, list[str]]:
    """Op-table columns (one row per item and rank-step) and the explicit graph.

    ``step_ids[rank]`` maps step index to step number; only steps in ``common`` are kept. Raises
    ``TraceError`` when ranks or steps do not share one item structure (naming the first place)."""
    cells: list[tuple[int, int, list[Item]]] = []
    entry: dict[tuple[int, int], float] = {}
    opened: dict[tuple[int, int], float] = {}  # (DP rank, step): the rank's step open, absolute
    for rs in rank_steps:
        for si, items in enumerate(rs.steps):
            sid = step_ids[rs.rank][si] if si < len(step_ids[rs.rank]) else si
            if sid in common:
                cells.append((rs.rank, sid, items))
                entry[(rs.rank, sid)] = rs.entry[si] if si < len(rs.entry) else items[0].start
                if si < len(rs.opened):
                    opened[(coords[rs.rank][0], sid)] = rs.opened[si] + origins[rs.rank]
    if not cells:
        raise TraceError("no GPU kernels or CPU ops inside the profiled steps")
    cells, matched_by = _align_collectives(cells)
    ref_rank, ref_step, ref = cells[0]
    ref_struct = _structure(ref)
    if not ref:
        raise TraceError("no kernels or CPU ops in the profiled step", rank=ref_rank, step=ref_step)
    for rank, sid, items in cells[1:]:
        st = _structure(items)
        if st != ref_struct:
            pos = next((i for i, (a, b) in enumerate(zip(st, ref_struct, strict=False)) if a != b),
                       min(len(st), len(ref_struct)))
            raise TraceError(
                f"the kernel-level structure differs: {len(st)} items vs {len(ref_struct)} on rank "
                f"{ref_rank} step {ref_step}, first difference at item {pos}",
                rank=rank, step=sid,
            )
    per_cell = [items for _, _, items in cells]
    for it in ref:
        if it.key_fn is not None and not it.key:
            it.key = it.key_fn()
    deps, consumed = _graph_edges(ref, per_cell)
    names: list[str] = []
    seqs: list[int] = []
    counter: Counter[str] = Counter()
    for it in ref:
        nm = ("params-all-gather" if it.phase == _FWD else "grads-reduce-scatter") if it.coll \
            else _PHASE_TYPE[it.phase]
        names.append(nm)
        seqs.append(counter[nm])
        counter[nm] += 1
    keys = ("dp_rank", "stage", "rank", "step", "optype", "start_ts", "duration", "seq_id")
    cols: dict[str, list[Any]] = {k: [] for k in keys}
    host_idle = 0.0
    seg_time = 0.0
    # a consumed collective's result was there when its consumer began: its span ends no later
    clip = [(c, k) for k, cs in enumerate(consumed) if DDP_COPY in ref[k].key for c in cs]
    for rank, sid, items in cells:
        d = coords[rank][0]
        org = origins[rank]
        ends: list[float] = []
        done = {c: min(items[c].end, max(items[k].start, items[c].start)) for c, k in clip}
        for k, it in enumerate(items):
            if it.coll:
                start, end = it.start, done.get(k, it.end)
            else:
                ready = max((ends[u] for u in deps[k]), default=min(entry[(rank, sid)], it.start))
                start = ready if ready <= it.start else it.start
                end = it.end
                nxt = items[k + 1] if k + 1 < len(items) else None
                if nxt is not None and nxt.coll:
                    end = max(end, min(nxt.start, nxt.launch))
                host_idle += max(0.0, (end - start) - it.busy)
                seg_time += end - start
            ends.append(end)
            cols["dp_rank"].append(d)
            cols["stage"].append(0)
            cols["rank"].append(rank)
            cols["step"].append(sid)
            cols["optype"].append(names[k])
            cols["start_ts"].append(start + org)
            cols["duration"].append(end - start)
            cols["seq_id"].append(seqs[k])
    n_coll = sum(it.coll for it in ref)
    spread_notes = _entry_spread(entry, origins, cells)
    kinds = Counter(it.kind for it in ref if it.coll)
    notes = [
        f"kernel-level model: {len(ref) - n_coll} compute segments and {n_coll} collectives per rank "
        "and step (" + (", ".join(f"{k} x{v}" for k, v in sorted(kinds.items())) or "no collectives")
        + f"), matched across ranks {matched_by}; collectives overlap compute where the trace "
        f"shows it ({sum(len(c) for c in consumed)} consuming waits)",
        f"host-bound share of compute segments: {host_idle / seg_time:.0%} of their time the device "
        "waited for the CPU to launch work (CPU launch gaps via correlation ids)" if seg_time > 0
        else "no compute segment time",
        *spread_notes,
    ]
    graph = ExplicitGraph(
        nodes=[(OPTYPE_CODE[nm], q) for nm, q in zip(names, seqs, strict=True)],
        deps=deps,
        collective=[it.coll for it in ref],
        pool=[it.key + f" [{nm}]" for it, nm in zip(ref, names, strict=True)],
        model=KERNEL_MODEL,
        why="no record_function spans with Megatron/NDTimeline names",
        synced=[not (it.coll and it.group == ENQUEUE_GROUP) for it in ref],
        opened=opened or None,
    )
    return cols, graph, notes


ENTRY_SPREAD_NOTE = 0.02  # a spread of rank step entries above this share of the step is reported


def _entry_spread(
    entry: dict[tuple[int, int], float], origins: dict[int, float], cells: list[tuple[int, int, list[Item]]]
) -> list[str]:
    """Notes on steps whose ranks began at different times: the lag of a late rank comes from
    before the traced step (its previous step or the time before profiling), which no op of the
    traced step explains; it shows as simulation error."""
    out: list[str] = []
    by_step: dict[int, dict[int, float]] = {}
    ends: dict[int, float] = {}
    for rank, sid, items in cells:
        by_step.setdefault(sid, {})[rank] = entry[(rank, sid)] + origins[rank]
        last = max(it.end for it in items) + origins[rank]
        ends[sid] = max(ends.get(sid, -np.inf), last)
    for sid, per in sorted(by_step.items()):
        t0 = min(per.values())
        spread = max(per.values()) - t0
        span = ends[sid] - t0
        if span > 0 and spread > ENTRY_SPREAD_NOTE * span:
            late = sorted(per, key=lambda r: -per[r])[:3]
            out.append(
                f"unexplained part of step {sid}: its ranks began their work in it (after "
                f"ProfilerStep start and any dataloader wait) up to {spread * 1e3:.2f} ms apart "
                f"({spread / span:.0%} of the step; latest: "
                + ", ".join(f"rank {r} +{(per[r] - t0) * 1e3:.2f} ms" for r in late)
                + "); that lag comes from before the traced step, no traced op explains it, and it "
                "is the simulation error's main part: trace more steps to see where it comes from"
            )
    return out
