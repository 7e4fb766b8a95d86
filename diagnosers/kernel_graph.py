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
A communication node the reader marks unsynchronised (a CPU backend's enqueue call) is a group of
one member per rank: its time is its own duration, and no rank waits for another at it.
``pool`` names the op type each node's ideal duration is pooled over (ops of the same type take
the same time), finer than the coarse ``optype`` the report attributes by.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from diagnosers.graph import Template, _node_name, _topo_order
from diagnosers.model import Trace, TraceError
from diagnosers.readers.normalize import dense_ids


@dataclass
class ExplicitGraph:
    """One step of one rank: nodes, the nodes each waits for, which are collectives, op types.

    ``nodes[i] = (optype code, seq_id)``; ``deps[i]`` lists node indices; ``collective[i]`` marks a
    communication node, a group of its own; ``pool[i]`` is its op-type key for the ideal duration.
    ``synced[i]`` (default: every collective) says whether that group is synchronised across the
    DP ranks (a rendezvous: transfer = end minus the latest member's start on any rank) or each
    rank's member runs on its own (transfer = its own duration: a call that hands work to a
    backend thread and waits for no peer). ``model`` and ``why`` say which job model produced it,
    for the report's notes. ``opened`` (when the reader knows it) maps (DP rank, step id) to the
    absolute time that rank opened the step (its ``ProfilerStep#N`` annotation began): a rank's
    idle time before it is no part of that step.
    """

    nodes: list[tuple[int, int]]
    deps: list[list[int]]
    collective: list[bool]
    pool: list[str]
    model: str = "kernel-level"
    why: str = ""
    notes: list[str] = field(default_factory=list)
    synced: list[bool] | None = None
    opened: dict[tuple[int, int], float] | None = None


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
    dp_sync: list[bool] = []
    for v in range(n):
        if g.collective[v]:
            group[v] = len(groups)
            groups.append([v])
            dp_sync.append(True if g.synced is None else bool(g.synced[v]))
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
        group_dp_sync=dp_sync,
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


def node_label(t: Template, v: int) -> str:
    """A kernel-level node's name for notes: its op type and sequence id."""
    from diagnosers.model import OPTYPES

    return f"{OPTYPES[int(t.optype[v])]} #{int(t.seq[v])}"
