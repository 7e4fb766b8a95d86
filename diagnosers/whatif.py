"""What-if analysis (METHOD.md A3-A5): the engine object, ad-hoc scenarios and the full report.

``build_engine(trace)`` measures the trace once (transfer times, launch delays, actual step times)
and keeps the template graph; its ``simulate`` runs any batch of duration vectors. ``analyze(trace)``
fills a :class:`~diagnosers.report.WhatIfReport`; ``run_scenario`` answers "what if this subset of
ops ran at its typical duration" for the MCP ``run_whatif`` tool and the remedies.

Definitions (the artifact's):

- original duration of an op: a local op's ``duration``; a group member's transfer time
  ``end - latest start among the group's members`` (over every DP rank of the step for
  DP-synchronised groups), values <= -10 ms set to 0;
- ideal duration: one value per op type pooled over the whole trace, the mean for compute types and
  the median for communication types (every non-compute kind, including the layernorm all-reduce);
- launch delay: ``start - latest end of the op's dependencies`` (``start - step start`` without
  dependencies), values <= -10 ms set to 0; zero in the baseline and in every what-if run;
- T_s: simulated step time with original durations and no launch delay; T_ideal: with ideal
  durations (the same for every step); S = mean T_s / T_ideal.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from diagnosers import npplain
from diagnosers.graph import CLAMP_NEG, Template, build_template
from diagnosers.interleaved import rendezvous_transfers
from diagnosers.model import OPTYPE_CODE, OPTYPE_KIND, OPTYPES, OpKind, Trace, TraceError
from diagnosers.readers.normalize import reduce_into
from diagnosers.simulate import Array, Patch, mixed_source, simulate, simulate_columns

# The method's thresholds (S >= STRAGGLING_THRESHOLD: straggling; below DECOMPOSE_THRESHOLD the
# artifact leaves attributions empty; METHOD.md A5) are defined once, in the vocabulary.
from diagnosers.thresholds import DECOMPOSE_THRESHOLD, STRAGGLING_THRESHOLD, fidelity_fields, measured_loss

if TYPE_CHECKING:  # the report models import pydantic: only the functions that return them load them
    from diagnosers.report import ScenarioResult, WhatIfReport

MW_PERCENT = 3  # M_W fixes the slowest ceil(3% x workers) workers
SIM_CHECK_RTOL = 1e-3  # re-simulating with launch delays should reproduce actual step times

# Op-type groups of the by-optype attribution: P2P merged per direction (the artifact's names).
PP_COMM_GROUPS: dict[str, tuple[str, ...]] = {
    "forward-pp-comm": ("forward-send", "forward-recv"),
    "backward-pp-comm": ("backward-send", "backward-recv"),
}
_IS_COMPUTE_TYPE = np.array([OPTYPE_KIND[o] is OpKind.COMPUTE for o in OPTYPES])


def median(values: Array) -> float:
    """``np.median`` of a float array as a float, computed as numpy computes it without its NaN
    check importing ``numpy.ma`` (a sixth of a small trace's run): :func:`diagnosers.npplain.median`."""
    return float(npplain.median(values))


def optype_group_of(name: str) -> str:
    """The by-optype attribution key of an op type (P2P merged into forward/backward-pp-comm)."""
    for key, members in PP_COMM_GROUPS.items():
        if name in members:
            return key
    return name


@dataclass
class WhatIfEngine:
    """A measured trace and its template graph, ready to simulate what-if scenarios.

    Per-op vectors are aligned with ``trace.ops`` rows, made on first use (``analyze`` works on
    the dense arrays and never reads them; the diagnosis probe does):

    - ``original``: compute = ``duration``, communication = transfer time (see module docstring);
    - ``ideal``: the op type's pooled typical value;
    - ``launch_delay``: measured launch delay (0 in every what-if run unless passed explicitly).

    ``steps`` lists the step ids; every step-time array has one column per step in that order.
    Dense arrays are ``(n_nodes, dp, n_steps)`` over the template (``template.dense`` /
    ``template.gather`` convert).
    """

    trace: Trace
    template: Template
    steps: list[int]
    actual_step_times: Array
    orig_dense: Array
    ideal_node: Array
    launch_dense: Array
    start_dense: Array
    notes: list[str] = field(default_factory=list)
    _nodelay: Array | None = None
    _ideal: float | None = None
    _rows: dict[str, Array] = field(default_factory=dict, repr=False)

    def _per_row(self, name: str, make: Callable[[], Array]) -> Array:
        if name not in self._rows:
            self._rows[name] = make()
        return self._rows[name]

    @property
    def original(self) -> Array:
        """Per row: compute duration or communication transfer time."""
        return self._per_row("original", lambda: self.template.gather(self.orig_dense))

    @property
    def ideal(self) -> Array:
        """Per row: the op type's typical duration."""
        return self._per_row("ideal", lambda: self.ideal_node[self.template.node_of_row])

    @property
    def launch_delay(self) -> Array:
        """Per row: the measured launch delay."""
        return self._per_row("launch_delay", lambda: self.template.gather(self.launch_dense))

    @property
    def fills_every_cell(self) -> bool:
        """Whether every (node, dp rank, step) cell of the dense layout holds one op (a regular
        trace): then each scenario over the rows is fully given by its per-row values."""
        t = self.template
        # one cell per row: the row count, without building the rows' flat index
        return len(t.node_of_row) == t.n_nodes * t.dp * len(self.steps)

    def type_values(self, codes: Iterable[int]) -> dict[int, Array] | None:
        """Per op-type code of ``codes`` that the trace has: every row's original duration of that
        type, read node by node from the dense layout (an order of its own, not the rows'). Only
        where those cells are exactly the rows: a template rebuilt from the op table (a node's rows
        all of its op type) with one op in every cell (``fills_every_cell``); None otherwise (a
        reader-stated graph, an irregular trace)."""
        if self.trace.graph is not None or not self.fills_every_cell:
            return None
        t = self.template
        present = set(t.optype.tolist())  # node-sized
        return {c: self.orig_dense[t.optype == c].reshape(-1) for c in sorted(set(codes) & present)}

    def type_blocks(self, codes: Iterable[int]) -> list[tuple[int, int, Array]] | None:
        """Per (stage, op-type code of ``codes``) with ops, in that order: ``(stage, code, block)``,
        the block the original durations of that stage's ops of that type in every (DP rank,
        step) cell, ``(m, dp, n_steps)`` for its ``m`` nodes: a view of the dense layout (a
        template numbers its nodes by stage, then op type, then seq id, so each such set of nodes
        is one run), no copy. Only where the cells are exactly the rows (as :meth:`type_values`)
        over the meta's DP ranks and stages; None otherwise."""
        t = self.template
        meta = self.trace.meta
        if self.trace.graph is not None or not self.fills_every_cell or (t.dp, t.pp) != (meta.dp, meta.pp):
            return None
        wanted = set(int(c) for c in codes)
        out: list[tuple[int, int, Array]] = []
        # node-sized: the runs of equal (stage, op type) over the node numbering
        if not t.n_nodes:
            return None
        key = t.stage * (int(t.optype.max()) + 1) + t.optype
        starts = np.r_[0, np.flatnonzero(key[1:] != key[:-1]) + 1, t.n_nodes]
        seen: set[tuple[int, int]] = set()
        for a, b in zip(starts[:-1].tolist(), starts[1:].tolist(), strict=True):
            s, o = int(t.stage[a]), int(t.optype[a])
            if (s, o) in seen:  # not one run per (stage, type): not a template of that numbering
                return None
            seen.add((s, o))
            if o in wanted:
                out.append((s, o, self.orig_dense[a:b]))
        return sorted(out, key=lambda x: (x[0], x[1]))

    def cell_sums(self, codes: tuple[int, ...], steps: npt.NDArray[np.int64]) -> Array | None:
        """Per (step, DP rank, stage) cell ``(n_steps, dp, pp)``: the summed original durations of
        its ops of the types ``codes`` (compute or optimizer types), read node by node off the
        dense layout: the same terms as a bincount over the rows, added in the template's node
        order rather than the rows' (the last bits may differ), without a row-sized gather. Only
        where those cells are exactly the rows (as ``type_values``) over the statistics' ``steps``
        and the meta's DP ranks and stages, and hold the rows' durations (no node of those types
        in a communication group, whose cells hold transfer times); None otherwise."""
        t = self.template
        if self.trace.graph is not None or not self.fills_every_cell:
            return None
        meta = self.trace.meta
        if t.dp != meta.dp or t.pp != meta.pp or not np.array_equal(np.asarray(t.steps), steps):
            return None
        nodes = np.isin(t.optype, codes)
        if t.rendezvous_groups or any(nodes[m].any() for m in t.groups):
            return None
        out = np.zeros((t.pp, t.dp, len(steps)))
        for v in np.flatnonzero(nodes).tolist():  # node-sized: each node's (dp, steps) cells added
            out[int(t.stage[v])] += self.orig_dense[v]
        return np.ascontiguousarray(out.transpose(2, 1, 0))

    def order_statistic(
        self, code: int, fraction: float, steps: npt.NDArray[np.bool_] | None = None, per_step: bool = False
    ) -> Array | None:
        """Per worker ``(dp, pp)``, or with ``per_step`` per (step, worker) cell ``(n_steps, dp, pp)``:
        the original duration at position ``floor(fraction * (n - 1))`` of its ``n`` ops of type
        ``code`` in ascending order, over the ``steps`` (a mask over step indices; every step by
        default, and always with ``per_step``); NaN where there are none. Read where the values
        lie, each stage's nodes of that type a (nodes, dp, steps) block of the dense layout, so no
        row is found or gathered: an order statistic does not depend on the order of its values.
        Only where the cells are exactly the rows (as :meth:`type_values`); None otherwise."""
        if self.trace.graph is not None or not self.fills_every_cell:
            return None
        t = self.template
        dp, ns = self.shape
        sel = np.ones(ns, dtype=bool) if steps is None or per_step else np.asarray(steps, dtype=bool)
        out = np.full((ns, dp, t.pp) if per_step else (dp, t.pp), np.nan)
        n_sel = int(sel.sum())
        of_type = t.optype == code
        for p in range(t.pp):
            nodes = np.flatnonzero(of_type & (t.stage == p))
            if not nodes.size or not n_sel:
                continue
            block = self.orig_dense[nodes]  # (m, dp, ns): each (dp, step) cell's m ops of the type
            if per_step:
                at = math.floor(fraction * (len(nodes) - 1))
                out[:, :, p] = np.partition(block, at, axis=0)[at].T
            else:
                # each DP rank's ops over the steps asked for, one row per rank
                per_rank = block[:, :, sel].transpose(1, 0, 2).reshape(dp, -1)
                at = math.floor(fraction * (per_rank.shape[1] - 1))
                out[:, p] = np.partition(per_rank, at, axis=1)[:, at]
        return out

    @property
    def shape(self) -> tuple[int, int]:
        """(dp, n_steps)."""
        return self.template.dp, len(self.steps)

    def simulate(
        self, durations: npt.ArrayLike, *, launch_delay: npt.ArrayLike | None = None
    ) -> npt.NDArray[np.float64]:
        """Step times ``(k, n_steps)`` for per-op duration vectors ``(n_ops,)`` or ``(k, n_ops)``.

        Each vector gives, per op, a compute duration or a communication transfer time (the same
        meaning as ``original`` / ``ideal``). Launch delays are 0 unless ``launch_delay`` (``(n_ops,)``)
        is given. One vectorised pass serves all k scenarios.
        """
        d = np.asarray(durations, dtype=np.float64)
        if d.ndim == 1:
            d = d[None]
        n_ops = len(self.trace.ops)
        if d.ndim != 2 or d.shape[1] != n_ops:
            raise ValueError(f"durations must be (n_ops,) or (k, n_ops) with n_ops={n_ops}; got {d.shape}")
        if launch_delay is None:
            few = self._changed_rows(d)
            if few is not None:
                return self._simulate_changed(d, few)
        return self._simulate_rows(d, launch_delay)

    # at most this many scenarios, and this share of the rows changed, for ``_simulate_changed``
    CHANGED_MAX_SCENARIOS = 4
    CHANGED_MAX_SHARE = 1 / 16

    def _changed_rows(self, d: npt.NDArray[np.float64]) -> npt.NDArray[np.intp] | None:
        """The rows where some scenario of ``d`` (k, n_ops) differs from the original durations
        (in its bits: NaN and -0.0 alike), when they are few (``CHANGED_MAX_SHARE`` of the rows,
        ``CHANGED_MAX_SCENARIOS`` scenarios), the original is made already (the probe's) and every
        cell of the dense layout holds one row; None otherwise."""
        original = self._rows.get("original")
        if (
            original is None
            or d.shape[0] > self.CHANGED_MAX_SCENARIOS
            or not (d.flags.c_contiguous and original.flags.c_contiguous)
            or not self.fills_every_cell
        ):
            return None
        changed = (d.view(np.uint64) != original.view(np.uint64)[None]).any(axis=0)
        rows = np.flatnonzero(changed)
        return rows if len(rows) <= self.CHANGED_MAX_SHARE * len(original) else None

    def _simulate_changed(
        self, d: npt.NDArray[np.float64], rows: npt.NDArray[np.intp]
    ) -> npt.NDArray[np.float64]:
        """:meth:`simulate` of ``d`` (k, n_ops), equal to the original durations outside ``rows``
        (``_changed_rows``): every node reads the dense original (whose cells are the original's
        rows, bit for bit), the nodes of ``rows`` with those rows' cells written per scenario. The
        same duration of every cell as the rows scattered (so the same step times), without a
        row-sized scatter and transposed copy (a worker's compute at its peers' pace changes 640 of
        1.9M rows: the marginal gain's run)."""
        t = self.template
        k = d.shape[0]
        nodes = t.node_of_row[rows]
        order = np.argsort(nodes, kind="stable")
        rows, nodes = rows[order], nodes[order]
        per_node: dict[int, npt.NDArray[np.intp]] = {}
        if len(rows):
            starts = np.flatnonzero(np.r_[True, nodes[1:] != nodes[:-1]]).tolist()
            for a, b in zip(starts, [*starts[1:], len(rows)], strict=True):
                per_node[int(nodes[a])] = rows[a:b]

        def get(v: int) -> Array:
            own = per_node.get(v)
            if own is None:
                return self.orig_dense[v][None]
            out = np.repeat(self.orig_dense[v][None], k, axis=0)  # (k, dp, ns)
            out[:, t.dp_of_row[own], t.step_of_row[own]] = d[:, own]
            return out

        return self.simulate_dense(get, k)

    def _simulate_rows(
        self, d: npt.NDArray[np.float64], launch_delay: npt.ArrayLike | None
    ) -> npt.NDArray[np.float64]:
        """:meth:`simulate` of ``d`` (k, n_ops): every row's value scattered to the dense layout."""
        k = d.shape[0]
        dp, ns = self.shape
        t = self.template
        # scattered in (step, dp, node) order, scenario axis last (each row's k values land in one
        # place), then copied transposed to (n_nodes, k, dp, ns): rows stored in (step, worker)
        # blocks write short runs there, where the node-major layout made a cache miss of each
        # row (as ``Template.dense`` does; about half the time of one scenario at 1.9M ops)
        by_step = np.empty((ns * dp * t.n_nodes, k))
        by_step[t.step_major_index] = d.T
        dense = np.ascontiguousarray(by_step.reshape(ns, dp, t.n_nodes, k).transpose(2, 3, 1, 0))
        del by_step
        launch = None
        if launch_delay is not None:
            launch = t.dense(np.asarray(launch_delay, dtype=np.float64), fill=0.0)[:, None]
        return simulate(t, dense, (k, dp, ns), launch=launch).step_times

    def simulate_masked(
        self, masks: Sequence[npt.NDArray[np.bool_]], *, ideal_inside: bool = True
    ) -> npt.NDArray[np.float64]:
        """Step times ``(k, n_steps)``, launch delay 0, of one scenario per row mask: the masked rows
        at their ideal duration and the others at their original one (``ideal_inside``), or the
        masked rows original and the others ideal. The same numbers as :meth:`simulate` of the
        ``np.where(mask, ideal, original)`` vectors, without making them: each mask is scattered
        to the dense layout as booleans and every node mixes its two values itself (nodes no
        scenario touches keep their narrow shape) (``dense_masks``)."""
        use = self.dense_masks(masks)
        touched: npt.NDArray[np.bool_] = np.asarray(use.any(axis=(0, 2, 3)))
        ideal3 = self.ideal_node[:, None, None]
        inside, outside = (ideal3, self.orig_dense) if ideal_inside else (self.orig_dense, ideal3)

        def get(v: int) -> Array:
            if not touched[v]:
                return outside[v][None]
            return np.where(use[:, v], inside[v][None], outside[v][None])

        return self.simulate_dense(get, len(masks))

    def dense_masks(self, masks: Sequence[npt.NDArray[np.bool_]]) -> npt.NDArray[np.bool_]:
        """``(k, n_nodes, dp, n_steps)``: each row mask laid on the dense layout, a cell True when
        its row is masked (False where no row lies), as ``flat_index[mask]`` scattered would set it.

        A mask of few rows (``FEW_ROWS`` of them at most: one worker's ops) sets its rows' cells
        alone; with an op in every cell (``fills_every_cell``) a mask of all but few rows is the
        complement of those few rows' cells. Any other mask is scattered whole through the
        step-major index (the engine's own, which ``Template.dense`` and ``gather`` use: each row
        has a cell of its own) and copied transposed. No node-major index of every row (15 MB of
        intp at 1.9M ops, kept once made) is made for them."""
        t = self.template
        dp, ns = self.shape
        use = np.zeros((len(masks), t.n_nodes, dp, ns), dtype=bool)
        flat = use.reshape(len(masks), -1)
        by_step: npt.NDArray[np.bool_] | None = None
        for i, m in enumerate(masks):
            m = np.asarray(m, dtype=bool)
            few = self.FEW_ROWS * len(m)
            n_set = int(np.count_nonzero(m))
            if n_set <= few:
                flat[i, self._cells_of(np.flatnonzero(m))] = True
            elif self.fills_every_cell and len(m) - n_set <= few:
                flat[i, self._cells_of(np.flatnonzero(~m))] = True
                np.logical_not(flat[i], out=flat[i])
            else:
                if by_step is None:
                    by_step = np.zeros(ns * dp * t.n_nodes, dtype=bool)  # cells without a row: False
                by_step[t.step_major_index] = m
                use[i] = by_step.reshape(ns, dp, t.n_nodes).transpose(2, 1, 0)
        return use

    # the share of the rows a mask (or its complement) may hold for ``dense_masks`` to set its
    # rows' cells one by one
    FEW_ROWS = 1 / 16

    def _cells_of(self, rows: npt.NDArray[np.intp]) -> npt.NDArray[np.intp]:
        """The flat positions of ``rows``' cells in a C-order dense array (``flat_index[rows]``),
        computed for those rows only."""
        t = self.template
        pos = t.node_of_row[rows].astype(np.intp)
        pos *= t.dp
        pos += t.dp_of_row[rows]
        pos *= len(self.steps)
        pos += t.step_of_row[rows]
        return pos

    def simulate_dense(
        self, durations: Callable[[int], Array | Patch] | Array, k: int, *, dp: int | None = None
    ) -> npt.NDArray[np.float64]:
        """Step times ``(k, n_steps)`` for a duration source over template nodes (see ``simulate``)."""
        return simulate(self.template, durations, (k, dp or self.template.dp, len(self.steps))).step_times

    @property
    def nodelay_step_times(self) -> Array:
        """T_s: original durations, launch delay 0, per step."""
        if self._nodelay is None:
            self._nodelay = self.simulate_dense(lambda v: self.orig_dense[v][None], 1)[0]
        return self._nodelay

    @property
    def ideal_step_time(self) -> float:
        """T_ideal: every op at its type's typical duration (identical for every step)."""
        if self._ideal is None:
            self._ideal = float(
                simulate(self.template, lambda v: self.ideal_node[v], (1, 1, 1)).step_times[0, 0]
            )
        return self._ideal

    def launch_step_times(self) -> Array:
        """Simulated step times with original durations *and* measured launch delays."""
        ld = self.launch_dense
        return simulate(
            self.template,
            lambda v: self.orig_dense[v][None],
            (1, *self.shape),
            launch=lambda v: ld[v][None],
        ).step_times[0]


def template_of(trace: Trace) -> Template:
    """The trace's template dependency graph: the one its reader stated (kernel-level traces) or
    the one :func:`diagnosers.graph.build_template` rebuilds from the op names."""
    if trace.graph is not None:
        from diagnosers.kernel_graph import template_from_explicit

        return template_from_explicit(trace, trace.graph)
    return build_template(trace)


def build_engine(trace: Trace) -> WhatIfEngine:
    """Build the template graph of ``trace`` and measure transfer times, launch delays, step times."""
    t = template_of(trace)
    ops = trace.ops
    ns = len(t.steps)
    step_min = reduce_into(np.minimum, t.step_of_row, ops.start_ts, ns, np.inf)
    start = t.dense(ops.start_ts)
    start -= step_min  # relative to the step start (steps are the last dense axis)
    orig = t.dense(ops.duration)
    end = start + orig
    actual = end.max(axis=(0, 1))

    # the durations become the original vector in place: transfer times for group members
    for g, members in enumerate(t.groups):
        last = start[members].max(axis=0)
        if t.group_dp_sync[g]:
            last = last.max(axis=0, keepdims=True)
        tr = end[members] - last
        tr[tr <= -CLAMP_NEG] = 0.0
        orig[members] = tr
    if t.rendezvous_groups:  # interleaved: a P2P pair's own time, not its batched call's
        rendezvous_transfers(t.groups, t.rendezvous_groups, t.rendezvous_calls, start, end, orig, CLAMP_NEG)

    launch = np.empty_like(start)
    for v in range(t.n_nodes):
        dv = t.deps[v]
        if not dv:
            launch[v] = start[v]
            continue
        # the latest end over the dependencies pairwise: most nodes have one or two, and a fancy
        # index over them would copy every dependency's (dp, steps) ends first
        latest = end[dv[0]]
        for u in dv[1:]:
            latest = np.maximum(latest, end[u])
        np.subtract(start[v], latest, out=launch[v])
    launch[launch <= -CLAMP_NEG] = 0.0

    ideal_node = np.empty(t.n_nodes)
    pool = t.optype if t.pool is None else t.pool
    for o in sorted(set(pool.tolist())):  # node-sized: no need for np.unique (which imports numpy.ma)
        nodes = pool == o
        vals = orig[nodes]
        ideal_node[nodes] = vals.mean() if _IS_COMPUTE_TYPE[t.optype[nodes][0]] else median(vals)

    eng = WhatIfEngine(
        trace=trace,
        template=t,
        steps=list(t.steps),
        actual_step_times=actual,
        orig_dense=orig,
        ideal_node=ideal_node,
        launch_dense=launch,
        start_dense=start,
        notes=list(t.notes),
    )
    return eng


# ----------------------------------------------------------------------------------------------
# ad-hoc scenarios


def select_ops(
    trace: Trace,
    *,
    optypes: Sequence[str] | None = None,
    dp_ranks: Sequence[int] | None = None,
    pp_ranks: Sequence[int] | None = None,
    steps: Sequence[int] | None = None,
) -> npt.NDArray[np.bool_]:
    """Rows matching every given filter (None = no filter). ``optypes`` accepts op-type names and
    the merged ``forward-pp-comm`` / ``backward-pp-comm`` / ``compute`` / ``comm`` group names."""
    ops = trace.ops
    mask = np.ones(len(ops), dtype=bool)
    if optypes is not None:
        codes: set[int] = set()
        for name in optypes:
            if name in PP_COMM_GROUPS:
                codes.update(OPTYPE_CODE[n] for n in PP_COMM_GROUPS[name])
            elif name == "compute":
                codes.update(int(i) for i in np.flatnonzero(_IS_COMPUTE_TYPE))
            elif name == "comm":
                codes.update(int(i) for i in np.flatnonzero(~_IS_COMPUTE_TYPE))
            elif name in OPTYPE_CODE:
                codes.add(OPTYPE_CODE[name])
            else:
                raise TraceError(f"unknown op type {name!r} in the scenario selector", op=name)
        mask &= np.isin(ops.optype, sorted(codes))
    if dp_ranks is not None:
        mask &= np.isin(ops.dp_rank, list(dp_ranks))
    if pp_ranks is not None:
        mask &= np.isin(ops.stage, list(pp_ranks))
    if steps is not None:
        mask &= np.isin(ops.step, list(steps))
    return mask


def run_scenario(
    trace_or_engine: Trace | WhatIfEngine,
    *,
    optypes: Sequence[str] | None = None,
    dp_ranks: Sequence[int] | None = None,
    pp_ranks: Sequence[int] | None = None,
    steps: Sequence[int] | None = None,
    free_comm: bool = False,
) -> ScenarioResult:
    """Simulate the job with a subset of ops changed, against the no-delay baseline.

    The subset is the ops matching every given selector (``optypes``, ``dp_ranks``, ``pp_ranks``,
    ``steps``; None means all). By default those ops are idealised (their type's typical duration);
    with ``free_comm`` the subset's communication ops cost nothing (transfer 0) and its compute ops
    keep their durations ("what if the network were infinitely fast"). ``speedup = t_orig / t_after``
    over mean step times; launch delays are 0 in both runs.
    """
    from diagnosers.report import ScenarioResult

    eng = trace_or_engine if isinstance(trace_or_engine, WhatIfEngine) else build_engine(trace_or_engine)
    sel = select_ops(eng.trace, optypes=optypes, dp_ranks=dp_ranks, pp_ranks=pp_ranks, steps=steps)
    durations = eng.original.copy()
    if free_comm:
        comm = sel & ~_IS_COMPUTE_TYPE[eng.trace.ops.optype]
        durations[comm] = 0.0
        changed = int(comm.sum())
    else:
        durations[sel] = eng.ideal[sel]
        changed = int(sel.sum())
    after = eng.simulate(durations)[0]
    before = eng.nodelay_step_times
    t_orig, t_after = float(before.mean()), float(after.mean())
    return ScenarioResult(
        t_orig=t_orig,
        t_after=t_after,
        speedup=t_orig / t_after if t_after > 0 else math.inf,
        step_times_orig={str(s): float(x) for s, x in zip(eng.steps, before, strict=True)},
        step_times_after={str(s): float(x) for s, x in zip(eng.steps, after, strict=True)},
        n_ops_changed=changed,
        free_comm=free_comm,
        selector={
            "optypes": list(optypes) if optypes is not None else None,
            "dp_ranks": [int(x) for x in dp_ranks] if dp_ranks is not None else None,
            "pp_ranks": [int(x) for x in pp_ranks] if pp_ranks is not None else None,
            "steps": [int(x) for x in steps] if steps is not None else None,
        },
    )


# ----------------------------------------------------------------------------------------------
# the report


def _ratios(times: Array, t_ideal: float) -> tuple[Array, Array]:
    """Per-scenario job ratio (K,) and per-step ratios (K, S) against the ideal step time."""
    return times.mean(axis=1) / t_ideal, times / t_ideal


def _per_step(steps: list[int], keys: list[str], per_step: Array) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for j, s in enumerate(steps):
        row = {k: float(per_step[i, j]) for i, k in enumerate(keys)}
        out[str(s)] = dict(sorted(row.items(), key=lambda kv: -kv[1]))
    return out


def _sorted(d: dict[str, float]) -> dict[str, float]:
    return dict(sorted(d.items(), key=lambda kv: -kv[1]))


def _ratio_metric(
    t_orig: float, t_ideal: float, t_rem: float, t_add: float, workers: list[tuple[int, int]]
) -> dict[str, Any]:
    """The fields of a ``report.RatioMetric`` (JSON values, the model's field order)."""
    gap = t_orig - t_ideal
    rem = (t_orig - t_rem) / gap if gap != 0 else None
    add = (t_add - t_ideal) / gap if gap != 0 else None
    return {
        "value": rem,
        "rem": rem,
        "add": add,
        "t_rem": t_rem,
        "t_add": t_add,
        "t_orig": t_orig,
        "t_ideal": t_ideal,
        "workers": [[int(d), int(s)] for d, s in workers],
    }


MAX_COLUMNS = 1 << 18  # scenario x dp x step cells per array in one pass (2 MiB of float64)
ALL_STAGES = -1  # a ``_worker_runs`` "worker" (dp rank, ALL_STAGES): that whole DP rank


def _worker_runs(eng: WhatIfEngine, workers: list[tuple[int, int]]) -> Array:
    """Step times (len(workers), S) with only one worker's ops put back into the ideal run (a
    worker ``(d, ALL_STAGES)``: every stage of DP rank d, the by-DP-rank put-back).

    One scenario per worker. Within a scenario every DP rank but the worker's runs the ideal, so the
    other ranks are simulated as one representative rank (two DP columns instead of dp), held as a
    column of its own (``simulate.simulate_columns``): it is the ideal run, one value per node, in
    every scenario until a DP-synchronised group makes it wait for the worker's rank. Scenarios
    are batched so that one pass holds at most ``MAX_COLUMNS`` cells per array.
    """
    t = eng.template
    dp, ns = eng.shape
    dcol = 2 if dp > 1 else 1
    orig, ideal = eng.orig_dense, eng.ideal_node
    ideal3 = ideal[:, None, None]
    out_times = np.zeros((len(workers), ns))
    chunk = max(1, MAX_COLUMNS // (dcol * ns))
    for lo in range(0, len(workers), chunk):
        block = workers[lo : lo + chunk]
        k = len(block)
        w_dp = np.array([w[0] for w in block])
        w_st = np.array([w[1] for w in block])
        by_stage = {s: np.flatnonzero((w_st == s) | (w_st == ALL_STAGES)) for s in range(t.pp)}

        def src(
            v: int,
            k: int = k,
            w_dp: npt.NDArray[np.int64] = w_dp,
            by_stage: dict[int, npt.NDArray[np.int64]] = by_stage,
        ) -> tuple[Array, ...]:
            idx = by_stage[int(t.stage[v])]
            rank = ideal3[v][None]  # the worker's DP rank: ideal unless the scenario restores v
            if len(idx):
                rank = np.full((k, 1, ns), ideal[v])
                rank[idx, 0, :] = orig[v][w_dp[idx]]
            return (rank, ideal3[v][None]) if dcol == 2 else (rank,)

        out_times[lo : lo + k] = simulate_columns(t, src, dcol, k, ns)
    return out_times


def _subset_runs(eng: WhatIfEngine, workers: list[tuple[int, int]]) -> tuple[float, float]:
    """(t_rem, t_add) mean step times for a set of workers idealised in the original run / put back
    into the ideal run."""
    t = eng.template
    dp, ns = eng.shape
    sel: dict[int, list[int]] = {}
    for d, s in workers:
        sel.setdefault(s, []).append(d)
    orig, ideal = eng.orig_dense, eng.ideal_node

    def src(v: int) -> Array:
        out = np.empty((2, dp, ns))
        out[0] = orig[v]
        out[1] = ideal[v]
        rows = sel.get(int(t.stage[v]))
        if rows:
            out[0, rows] = ideal[v]
            out[1, rows] = orig[v][rows]
        return out

    times = eng.simulate_dense(src, 2)
    return float(times[0].mean()), float(times[1].mean())


@dataclass
class _WholeJobRuns:
    """Step times of the scenarios over every DP rank that need no per-worker estimate, from one
    pass: each op-type group put back into the ideal run (``type_keys`` order), then each stage
    (``put_back``, (groups + pp, S)); each stage idealised in the baseline (``stage_idealised``,
    (pp, S))."""

    type_keys: list[str]
    put_back: Array
    stage_idealised: Array


def _whole_job_runs(eng: WhatIfEngine) -> _WholeJobRuns:
    """One pass for the ideal run, the baseline (T_s; both kept on the engine), the put-backs by
    op-type group and by stage and M_S's stage idealisations: every one of them gives each node
    either its original or its ideal durations, so they differ only in a boolean per (node,
    scenario), and one pass costs the node-by-node walk once instead of four times. Each
    scenario's numbers are those of its own pass (the same sums and maxima per element)."""
    t = eng.template
    pp = t.pp
    node_types = sorted(set(t.optype.tolist()))
    keys = sorted({optype_group_of(OPTYPES[o]) for o in node_types})
    k_opt = len(keys)
    # per (node, scenario): whether the node keeps its original durations (else its ideal ones)
    use_orig = np.zeros((t.n_nodes, 2 + k_opt + 2 * pp), dtype=bool)
    use_orig[:, 1] = True  # scenario 0: the ideal run; 1: the baseline
    for i, key in enumerate(keys):
        members = [o for o in node_types if optype_group_of(OPTYPES[o]) == key]
        use_orig[np.isin(t.optype, members), 2 + i] = True
    for s in range(pp):
        on_stage = t.stage == s
        use_orig[on_stage, 2 + k_opt + s] = True
        use_orig[~on_stage, 2 + k_opt + pp + s] = True
    ideal3 = eng.ideal_node[:, None, None]
    times = eng.simulate_dense(mixed_source(ideal3, eng.orig_dense, use_orig), use_orig.shape[1])
    if eng._ideal is None:
        eng._ideal = float(times[0, 0])
    if eng._nodelay is None:
        eng._nodelay = times[1]
    return _WholeJobRuns(keys, times[2 : 2 + k_opt + pp], times[2 + k_opt + pp :])


def analyze(
    trace: Trace,
    *,
    exact_top_k: int | None = None,
    progress: Callable[[float, str], None] | None = None,
    engine: WhatIfEngine | None = None,
) -> WhatIfReport:
    """The full what-if report of a trace (fields documented on :class:`WhatIfReport`): the model
    validated from :func:`report_json` (same arguments)."""
    from diagnosers.report import WhatIfReport

    doc = report_json(trace, exact_top_k=exact_top_k, progress=progress, engine=engine)
    return WhatIfReport.model_validate({**doc, "job": trace.meta})


def report_json(
    trace: Trace,
    *,
    exact_top_k: int | None = None,
    progress: Callable[[float, str], None] | None = None,
    engine: WhatIfEngine | None = None,
) -> dict[str, Any]:
    """The full what-if report of a trace as the JSON document ``WhatIfReport.model_dump(mode="json")``
    holds (the same keys in the same order, JSON values only), built without the pydantic models so
    that ``straggler-lens analyze`` does not import them; :func:`analyze` validates it into the model.

    ``exact_top_k`` restricts the exact per-worker runs to the K workers with the highest
    estimate (the report records it); None runs every worker exactly. ``progress(fraction,
    message)`` is called between phases. ``engine`` reuses an engine already built for this trace.
    Attributions are computed whatever S is; ``decomposed`` only says whether S reaches the
    artifact's 1.03 threshold.
    """

    def tick(f: float, msg: str) -> None:
        if progress is not None:
            progress(f, msg)

    tick(0.0, "building the dependency graph")
    eng = engine or build_engine(trace)
    t = eng.template
    steps = eng.steps
    dp = t.dp
    pp = t.pp
    notes = list(trace.notes) + list(eng.notes)
    tick(0.2, "simulating baseline, ideal, put-backs by op type and by stage")
    whole = _whole_job_runs(eng)
    t_nd = eng.nodelay_step_times
    t_id = eng.ideal_step_time
    if t_id <= 0:
        raise TraceError("the ideal step time is not positive; the trace holds no time")
    mean_nd = float(t_nd.mean())
    slowdown = mean_nd / t_id
    actual = eng.actual_step_times
    launch_slowdown = float(actual.mean() / mean_nd)
    t_launch = eng.launch_step_times()
    if not np.allclose(t_launch, actual, rtol=SIM_CHECK_RTOL, atol=1e-4):
        worst = int(np.argmax(np.abs(t_launch - actual)))
        notes.append(
            f"re-simulating with launch delays does not reproduce the actual step time of step "
            f"{steps[worst]} ({t_launch[worst]:.4f} s vs {actual[worst]:.4f} s): the dependency model "
            "misses something in this trace"
        )

    # step launch gap: gap before each worker's first op, averaged over workers
    first = np.stack([eng.start_dense[t.stage == s].min(axis=0) for s in range(pp)])  # (pp, dp, S)
    gap = first.mean(axis=(0, 1))

    # --- put-backs: by op type and by stage (whole nodes, from the pass above), by DP rank (one
    # rank restored)
    tick(0.3, "attributing by op type and stage")
    present = whole.type_keys
    k_opt = len(present)
    job_r, step_r = _ratios(whole.put_back, t_id)
    by_optype = {key: float(job_r[i]) for i, key in enumerate(present)}
    stage_keys = [str(s) for s in range(pp)]
    by_stage = {str(s): float(job_r[k_opt + s]) for s in range(pp)}
    by_optype_ps = _per_step(steps, present, step_r[:k_opt])
    by_stage_ps = _per_step(steps, stage_keys, step_r[k_opt:])
    t_add_stage = whole.put_back[k_opt:].mean(axis=1)

    tick(0.45, "attributing by DP rank and per worker")
    # a DP rank's put-back and a worker's exact run both put one DP rank's ops (all its stages, or
    # one stage's) back into the ideal run: when every worker runs exactly, one pass serves both
    all_workers = [(d, s) for s in range(pp) for d in range(dp)]
    every_worker = exact_top_k is None
    whole_ranks = [(d, ALL_STAGES) for d in range(dp)]
    rank_runs = _worker_runs(eng, whole_ranks + (all_workers if every_worker else []))
    times_dp = rank_runs[:dp]
    job_dp, step_dp = _ratios(times_dp, t_id)
    dp_keys = [str(d) for d in range(dp)]
    by_dp = {str(d): float(job_dp[d]) for d in range(dp)}
    by_dp_ps = _per_step(steps, dp_keys, step_dp)

    # --- per worker: the artifact's estimate, then exact runs
    tick(0.55, "per-worker slowdowns")
    ranks = np.full((dp, pp), -1, dtype=np.int64)
    ranks[trace.ops.dp_rank, trace.ops.stage] = trace.ops.rank
    estimate = np.minimum(job_dp[:, None], job_r[k_opt:][None, :])  # (dp, pp)
    # the artifact ranks by score, ties to the lower global rank
    ranked = sorted(all_workers, key=lambda w: (-estimate[w], ranks[w]))
    exact_set = ranked if exact_top_k is None else ranked[: max(0, exact_top_k)]
    exact: dict[tuple[int, int], float] = {}
    if every_worker:
        for w, row in zip(all_workers, rank_runs[dp:].mean(axis=1) / t_id, strict=True):
            exact[w] = float(row)
    elif exact_set:
        ex_times = _worker_runs(eng, exact_set)
        for w, row in zip(exact_set, ex_times.mean(axis=1) / t_id, strict=True):
            exact[w] = float(row)
    if exact_top_k is not None and len(exact_set) < len(all_workers):
        notes.append(
            f"exact per-worker slowdowns computed for the top {len(exact_set)} of {len(all_workers)} "
            "workers by estimate"
        )
    by_worker = [
        {
            "dp_rank": d,
            "pp_rank": s,
            "ranks": [int(ranks[d, s])],
            "slowdown": exact.get((d, s)),
            "slowdown_estimate": float(estimate[d, s]),
        }
        for d, s in sorted(all_workers, key=lambda w: (-(exact.get(w, -math.inf)), -estimate[w], ranks[w]))
    ]

    # --- M_W and M_S
    tick(0.8, "M_W and M_S")
    n_fix = math.ceil(len(all_workers) * MW_PERCENT / 100)
    slowest = ranked[:n_fix]
    t_rem, t_add = _subset_runs(eng, slowest)
    m_w = _ratio_metric(mean_nd, t_id, t_rem, t_add, slowest)
    rem_times = whole.stage_idealised
    m_s_by_stage = {
        str(s): _ratio_metric(
            mean_nd, t_id, float(rem_times[s].mean()), float(t_add_stage[s]), [(d, s) for d in range(dp)]
        )
        for s in range(pp)
    }
    m_s = m_s_by_stage[str(pp - 1)]

    decomposed = slowdown >= DECOMPOSE_THRESHOLD
    if not decomposed:
        notes.append(
            f"S = {slowdown:.3f} is below {DECOMPOSE_THRESHOLD}: the artifact would leave the "
            "attributions empty; they are computed anyway"
        )
    wasted = max(0.0, 1.0 - 1.0 / slowdown)
    actual_by_step = {str(s): float(x) for s, x in zip(steps, actual, strict=True)}
    ideal_by_step = {str(s): t_id for s in steps}
    fidelity = fidelity_fields(launch_slowdown - 1.0)
    tick(1.0, "done")
    # the keys in WhatIfReport's field order (and Attribution's, StepTimes', ...), so that this
    # document and the model's dump are the same JSON text (tests/engine/test_report_json.py)
    return {
        "fidelity": {**fidelity, "verdict": fidelity["verdict"].value},
        "slowdown": slowdown,
        "straggling": slowdown >= STRAGGLING_THRESHOLD,
        "decomposed": decomposed,
        "step_slowdown": {str(s): float(x / t_id) for s, x in zip(steps, t_nd, strict=True)},
        "launch_slowdown": launch_slowdown,
        "simulation_error": launch_slowdown - 1.0,
        "step_launch_gap": {str(s): float(x) for s, x in zip(steps, gap, strict=True)},
        "attribution": {
            "by_optype": _sorted(by_optype),
            "by_dp_rank": _sorted(by_dp),
            "by_stage": _sorted(by_stage),
            "by_optype_per_step": by_optype_ps,
            "by_dp_rank_per_step": by_dp_ps,
            "by_stage_per_step": by_stage_ps,
            "by_worker": by_worker,
            "by_worker_exact_top_k": exact_top_k
            if exact_top_k is not None and len(exact_set) < len(all_workers)
            else None,
        },
        "m_w": m_w["value"],
        "m_s": m_s["value"],
        "m_s_by_stage": {k: v["value"] for k, v in m_s_by_stage.items()},
        "fix_ratios": {"m_w": m_w, "m_s": m_s, "by_stage": m_s_by_stage},
        "wasted_fraction": wasted,
        "measured_loss_fraction": measured_loss(actual_by_step, ideal_by_step),
        "step_times": {
            "actual": actual_by_step,
            "no_delay": {str(s): float(x) for s, x in zip(steps, t_nd, strict=True)},
            "ideal": ideal_by_step,
        },
        "job": trace.meta.model_dump(mode="json"),
        "n_ops": len(trace.ops),
        "steps": [int(s) for s in steps],
        "notes": notes,
    }
