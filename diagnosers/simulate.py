"""The what-if simulator: a longest-path pass over the template graph (METHOD.md A3-A4).

One pass visits the template's super-nodes (a local op, or a whole communication group) in
topological order. Every node carries a numpy array over *columns* shaped ``(K, D, S)``: K scenarios,
D DP ranks, S steps. So N what-if scenarios, every DP rank and every step cost one pass over
N-wide arrays. Shapes broadcast: a duration that is the same for every scenario, DP rank or step may
have size 1 on that axis, and the pass keeps such axes small for as long as it can (the ideal run of
a whole job is a pass over 1x1x1 arrays).

Semantics (the artifact's simulator):

- a member starts at the latest end of its dependencies (0 = step start when it has none) plus its
  launch delay (0 unless given);
- a local op ends ``duration`` after its start;
- a group starts when its last member has started (over every DP rank of the step as well when the
  group is DP-synchronised); each member ends its own ``transfer`` time after that;
- a step's time is the latest end of any op in it (steps are independent; no cross-step edges).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from diagnosers.graph import Template

Array = npt.NDArray[np.float64]


@dataclass
class Patch:
    """A node's durations when most scenarios share one value: ``base`` (broadcastable to
    ``(K, D, S)``) for every scenario except ``rows``, whose durations are ``values`` (broadcastable
    to ``(len(rows), D, S)``). The pass then adds ``base`` to the start in place and writes the few
    patched rows, instead of materialising a ``(K, D, S)`` duration array for every node (a
    put-back pass restores one group per scenario, so each node differs from the base in one or a
    few scenarios)."""

    base: Array
    rows: npt.NDArray[np.intp]
    values: Array


DurationSource = Callable[[int], "Array | Patch"]


@dataclass
class SimResult:
    """Step times ``(K, S)`` and, when asked for, every node's start and end ``(n_nodes, K, D, S)``."""

    step_times: Array
    start: Array | None = None
    end: Array | None = None


def _as3(x: Array | float) -> Array:
    if type(x) is np.ndarray and x.ndim == 3 and x.dtype == np.float64:
        return x  # what every source of the engine returns: no conversion to look for
    a = np.asarray(x, dtype=np.float64)
    if a.ndim == 3:
        return a
    if a.ndim == 0:
        return a.reshape(1, 1, 1)
    if a.ndim == 2:  # (D, S)
        return a[None]
    raise ValueError(f"durations must broadcast to (K, D, S); got shape {a.shape}")


def _holds(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Whether shape ``a`` is the broadcast of ``a`` and ``b`` (``np.broadcast_shapes(a, b) == a``
    for arrays of equal rank, without its cost on every node of a pass)."""
    if len(a) == 3 and len(b) == 3:  # the simulator's (K, D, S) shapes, without a generator
        return (b[0] == a[0] or b[0] == 1) and (b[1] == a[1] or b[1] == 1) and (b[2] == a[2] or b[2] == 1)
    return len(a) == len(b) and all(y == x or y == 1 for x, y in zip(a, b, strict=True))


def _maximum(a: Array, b: Array, own: bool) -> Array:
    """``np.maximum(a, b)``, written into ``a`` when ``a`` is a fresh array of the result's shape."""
    if own and _holds(a.shape, b.shape):
        return np.maximum(a, b, out=a)
    return np.maximum(a, b)


def _plus(st: Array, d: Array | Patch, own: bool, k: int) -> Array:
    """The end ``st + d`` of a node that starts at ``st`` with durations ``d`` (an array, or a
    :class:`Patch` for a scenario axis of size ``k``), written into ``st`` when ``own`` says nothing
    else holds it and its shape is the result's. Element by element the same sums as ``st + d``
    with the patch materialised."""
    if not isinstance(d, Patch):
        d = _as3(d)
        if own and _holds(st.shape, d.shape):
            return np.add(st, d, out=st)
        return st + d
    base = _as3(d.base)
    # the patched rows first: the in-place add below overwrites st
    patched = (st[d.rows] if st.shape[0] > 1 else st) + _as3(d.values)
    e = np.add(st, base, out=st) if own and _holds(st.shape, base.shape) else st + base
    # both shapes are (., D or 1, S or 1): the result takes the larger of each
    shape = (k, max(e.shape[1], patched.shape[1]), max(e.shape[2], patched.shape[2]))
    if e.shape != shape:
        e = np.broadcast_to(e, shape).copy()
    e[d.rows] = patched
    return e


def simulate(
    t: Template,
    durations: DurationSource | Array,
    shape: tuple[int, int, int],
    *,
    launch: Callable[[int], Array] | Array | None = None,
    keep: bool = False,
) -> SimResult:
    """Simulate ``K`` scenarios over ``D`` DP ranks and ``S`` steps in one pass.

    ``durations`` is either an array ``(n_nodes, K, D, S)`` (any axis may be 1) or a function
    ``node -> array broadcastable to (K, D, S)`` (or a :class:`Patch` of one) giving a local op's
    duration or a group member's transfer time. ``launch`` likewise gives launch delays (omitted:
    0; never a patch). ``shape = (K, D, S)``; ``D`` must be the job's DP size whenever
    DP-synchronised groups should see every DP rank (a caller may pass a smaller D when the DP
    ranks it leaves out are identical to one that is kept).
    With ``keep`` the start and end of every node are returned too.
    """
    k, d, s = shape
    dur = durations if callable(durations) else (lambda v, a=durations: a[v])
    lau = None if launch is None else (launch if callable(launch) else (lambda v, a=launch: a[v]))
    n = t.n_nodes
    ends: list[Array | None] = [None] * n
    starts_kept: list[Array] | None = [np.empty(0)] * n if keep else None
    ends_kept: list[Array] | None = [np.empty(0)] * n if keep else None
    remaining = t.successor_counts.tolist()  # Python ints: counted down once per edge
    zero = np.zeros((1, 1, 1))
    step_end = zero
    deps = t.deps
    group = t.group.tolist()
    sync = t.group_dp_sync
    for members in t.order:
        starts = []
        for v in members:
            own = False  # whether this member's start is a fresh array the pass may overwrite
            dv = deps[v]
            if not dv:
                st = zero
            else:
                st = ends[dv[0]]  # type: ignore[assignment]
                for u in dv[1:]:
                    st = _maximum(st, ends[u], own)  # type: ignore[arg-type]
                    own = True
                for u in dv:
                    remaining[u] -= 1
                    if remaining[u] == 0 and not keep:
                        ends[u] = None
            if lau is not None:
                st = st + _as3(lau(v))
                own = True
            starts.append(st)
        g = group[members[0]]
        if g < 0:
            v = members[0]
            # the end can reuse the start's memory when nothing else holds the start
            e = _plus(starts[0], dur(v), own and not keep, k)
            ends[v] = e
            if keep:
                starts_kept[v] = starts[0]  # type: ignore[index]
                ends_kept[v] = e  # type: ignore[index]
            if remaining[v] == 0:
                step_end = np.maximum(step_end, e)
            continue
        eff = starts[0]
        for st in starts[1:]:
            eff = np.maximum(eff, st)
        if sync[g] and eff.shape[1] > 1:
            # a DP-synchronised group starts when the last member on any DP rank has started
            eff = eff.max(axis=1, keepdims=True)
        for v, st in zip(members, starts, strict=True):
            e = _plus(eff, dur(v), False, k)
            ends[v] = e
            if keep:
                starts_kept[v] = st  # type: ignore[index]
                ends_kept[v] = e  # type: ignore[index]
            if remaining[v] == 0:
                step_end = np.maximum(step_end, e)
    full = np.broadcast_to(step_end, (k, d, s))
    out = SimResult(step_times=full.max(axis=1))
    if keep:
        out.start = np.stack([np.broadcast_to(x, (k, d, s)) for x in starts_kept])  # type: ignore[union-attr]
        out.end = np.stack([np.broadcast_to(x, (k, d, s)) for x in ends_kept])  # type: ignore[union-attr]
    return out


ColumnSource = Callable[[int], "tuple[Array, ...]"]


def simulate_columns(t: Template, durations: ColumnSource, n_columns: int, k: int, s: int) -> Array:
    """Step times ``(K, S)`` of a pass whose DP axis is held as ``n_columns`` separate columns.

    ``durations(v)`` gives, per column, node v's durations broadcastable to ``(K, 1, S)``. The
    numbers are those of :func:`simulate` with the columns stacked on the D axis (the same maxima
    and sums, element by element: a DP-synchronised group starts at the latest start over the
    columns, a step ends at the latest end), but each column keeps its own narrow shape: a column
    that is the same in every scenario (the other DP ranks of a per-worker run, all ideal) stays
    one value per node until a DP-synchronised group makes it wait for a column that is not."""
    ends: list[tuple[Array, ...] | None] = [None] * t.n_nodes
    remaining = t.successor_counts.tolist()
    zero = np.zeros((1, 1, 1))
    cols = range(n_columns)
    step_end = [zero] * n_columns
    deps = t.deps
    group = t.group.tolist()
    sync = t.group_dp_sync
    for members in t.order:
        starts: list[tuple[list[Array], list[bool]]] = []
        for v in members:
            dv = deps[v]
            own = [False] * n_columns  # per column: whether its start is a fresh array
            if not dv:
                st = [zero] * n_columns
            else:
                st = list(ends[dv[0]])  # type: ignore[arg-type]
                for u in dv[1:]:
                    eu = ends[u]
                    for c in cols:
                        st[c] = _maximum(st[c], eu[c], own[c])  # type: ignore[index]
                        own[c] = True
                for u in dv:
                    remaining[u] -= 1
                    if remaining[u] == 0:
                        ends[u] = None
            starts.append((st, own))
        g = group[members[0]]
        if g < 0:
            v = members[0]
            st, own = starts[0]
            dur = durations(v)
            done = [(v, tuple(_plus(st[c], dur[c], own[c], k) for c in cols))]
        else:
            eff = list(starts[0][0])
            for st, _ in starts[1:]:
                eff = [np.maximum(eff[c], st[c]) for c in cols]
            if sync[g]:
                # a DP-synchronised group starts when the last member on any DP rank has started
                latest = eff[0]
                for c in cols[1:]:
                    latest = np.maximum(latest, eff[c])
                eff = [latest] * n_columns
            done = []
            for v in members:
                dur = durations(v)
                done.append((v, tuple(_plus(eff[c], dur[c], False, k) for c in cols)))
        for v, e in done:
            ends[v] = e
            if remaining[v] == 0:
                step_end = [np.maximum(step_end[c], e[c]) for c in cols]
    latest_end = np.broadcast_to(step_end[0], (k, 1, s))
    for c in cols[1:]:
        latest_end = np.maximum(latest_end, step_end[c])
    return np.array(latest_end[:, 0, :])


def mixed_source(a: Array, b: Array, use_b: npt.NDArray[np.bool_]) -> DurationSource:
    """Per node: scenario k takes ``b[v]`` where ``use_b[v, k]`` and ``a[v]`` elsewhere.

    ``a`` and ``b`` are ``(n_nodes, D, S)`` arrays (axes may be 1); ``use_b`` is ``(n_nodes, K)``.
    Nodes where all or no scenario switch keep the narrow shape, so the pass stays cheap; the
    others are a :class:`Patch` of the value most scenarios take, with the rest as patched rows.
    """
    all_b: npt.NDArray[np.bool_] = np.asarray(use_b.all(axis=1))
    any_b: npt.NDArray[np.bool_] = np.asarray(use_b.any(axis=1))

    n_b = use_b.sum(axis=1)
    k = use_b.shape[1]

    def get(v: int) -> Array | Patch:
        if all_b[v]:
            return b[v][None]
        if not any_b[v]:
            return a[v][None]
        # the side fewer scenarios take is the patch
        if n_b[v] <= k - n_b[v]:
            return Patch(a[v][None], np.flatnonzero(use_b[v]), b[v][None])
        return Patch(b[v][None], np.flatnonzero(~use_b[v]), a[v][None])

    return get
