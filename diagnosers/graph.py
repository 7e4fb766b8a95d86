"""The dependency model of the what-if method (METHOD.md A2), built once per job as a template.

The template holds one node per op of one step of one DP replica (identity ``(stage, optype,
seq_id)``), built from DP rank 0 and the first traced step, and is reused for every DP rank and every
step: all of them must carry the same ops (checked). Edges say "v cannot start before u ends";
communication groups say "these ops finish together, ``transfer`` after the last member started".

Edges inside a worker (per stage):

1. the forward/backward computes form one chain in observed order (start, seq_id, name);
2. the four P2P types each form a FIFO stream in observed order;
3. the k-th *valid* send/recv of a direction is matched to the k-th compute of that direction:
   ``recv_k -> compute_k``, ``compute_{k-1} -> recv_k``, ``compute_k -> send_k``;
   no-op records are left out of matching (type 1: a recv starting after the last compute of its
   direction or a send ending before the first compute ends, tolerance 5e-5 s; type 2: with VPP, a
   send/recv whose peer chunk would be outside the model) and each no-op is a group of its own;
   the first forward recv on stage 0 may be missing;
4. the first backward send and recv wait for the forward compute two places before the first
   backward compute (1F1B warm-up);
5. DP: all-gathers and reduce-scatters form one chain in observed order; the first forward compute
   of each model chunk waits for that chunk's all-gather; with ``separate-grads-all-reduce`` present
   (overlapped reduction) each chunk's reduce-scatter waits for the chunk's last backward compute;
6. the tail, over the op types present: last compute -> gc -> layernorm all-reduce -> embedding
   all-reduce (first and last stage) -> [reduce-scatters | separate all-reduce] -> clip -> optimizer.

One refinement over the artifact: a no-op record split from a batched P2P record (same start and
duration as a valid op of the other direction on the same worker) joins that op's group instead of
being a group of its own, because it waited for that op's peer (``join_batched_noops``; the
artifact's sample traces have no no-op records, so their results are unchanged).

Interleaved (VPP) jobs whose records fit Megatron's interleaved 1F1B program (``interleaved.py``)
get more: every call waits for the whole previous call (batched calls block until every transfer,
sends included, is done), the first call waits for the all-gathers, the tail for the last call,
no-op slots finish with their call, and the template lists its P2P groups and batched calls
(``rendezvous_groups`` / ``rendezvous_calls``) so that transfers are measured per pair. Other
templates carry neither and are built exactly as before.

Groups across workers: P2P pairs ``{X-send_k @ s, X-recv_k @ s+-1}`` by valid index; the embedding
all-reduce of the first and last stage; one group per DP collective, synchronised across all DP
ranks; the grad-norm clip across every stage, also DP-synchronised (a global barrier).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from diagnosers import interleaved
from diagnosers.model import OPTYPE_CODE, OPTYPES, Trace, TraceError
from diagnosers.readers.normalize import dense_ids

EPS_MATCH = 5e-5  # s; clock-skew tolerance when telling no-op P2P records apart (artifact's value)
CLAMP_NEG = 1e-2  # s; measured transfer or launch delays at or below -10 ms are set to 0

FWD = OPTYPE_CODE["forward-compute"]
BWD = OPTYPE_CODE["backward-compute"]
OPT = OPTYPE_CODE["optimizer"]
GC = OPTYPE_CODE["gc"]
FS, FR = OPTYPE_CODE["forward-send"], OPTYPE_CODE["forward-recv"]
BS, BR = OPTYPE_CODE["backward-send"], OPTYPE_CODE["backward-recv"]
AG = OPTYPE_CODE["params-all-gather"]
RS = OPTYPE_CODE["grads-reduce-scatter"]
SEP = OPTYPE_CODE["separate-grads-all-reduce"]
EMB = OPTYPE_CODE["embedding-grads-all-reduce"]
LN = OPTYPE_CODE["layernorm-grads-all-reduce"]
CLIP = OPTYPE_CODE["optimizer-clip-main-grad"]
DP_TYPES = (AG, RS, SEP)
P2P_TYPES = (FS, FR, BS, BR)

# (direction compute type, peer type, stage delta to the peer) per P2P type
_P2P_INFO: dict[int, tuple[int, int, int]] = {
    FS: (FWD, FR, +1),
    FR: (FWD, FS, -1),
    BS: (BWD, BR, -1),
    BR: (BWD, BS, +1),
}


@dataclass
class Template:
    """The dependency graph of one step of one DP replica, plus the maps from trace rows to nodes.

    Nodes are numbered by (stage, optype code, seq_id). ``deps[v]`` lists the nodes v waits for.
    ``group[v]`` is the communication group of v or -1 for a local op (compute, gc, layernorm
    all-reduce). ``order`` lists super-nodes (a local op or a whole group) in topological order.
    Row maps: trace row i is node ``node_of_row[i]`` at DP index ``dp_of_row[i]`` and step index
    ``step_of_row[i]``; every (node, dp, step) cell is filled exactly once.
    """

    n_nodes: int
    stage: npt.NDArray[np.int64]
    optype: npt.NDArray[np.int64]
    seq: npt.NDArray[np.int64]
    deps: list[list[int]]
    group: npt.NDArray[np.int64]
    groups: list[list[int]]
    group_dp_sync: list[bool]
    order: list[list[int]]
    node_of_row: npt.NDArray[np.integer[Any]]
    dp_of_row: npt.NDArray[np.integer[Any]]
    step_of_row: npt.NDArray[np.integer[Any]]
    steps: list[int]
    dp: int
    pp: int
    vpp: int
    no_ops: int = 0
    notes: list[str] = field(default_factory=list)
    # interleaved jobs laid on Megatron's program: P2P groups measured as rendezvous pairs
    # (``interleaved.rendezvous_transfers``); empty otherwise
    rendezvous_groups: list[int] = field(default_factory=list)
    rendezvous_calls: list[list[int]] = field(default_factory=list)  # nodes of each batched call
    # per node: the op-type class its ideal duration is pooled over (None: its optype); set by
    # explicit (kernel-level) graphs, whose op types are finer than the coarse optype column
    pool: npt.NDArray[np.int64] | None = None
    _flat: npt.NDArray[np.integer[Any]] | None = field(default=None, repr=False)
    _succ: npt.NDArray[np.int64] | None = field(default=None, repr=False)
    _step_major: npt.NDArray[np.intp] | None = field(default=None, repr=False)
    # per step index, its first row (rows in ascending step order), with the row count last;
    # an empty array when the rows are in no such order (``step_row_bounds``)
    _step_bounds: npt.NDArray[np.intp] | None = field(default=None, repr=False)

    def name(self, node: int) -> str:
        """``optype_seq_stage``, the artifact's op identity."""
        return f"{OPTYPES[int(self.optype[node])]}_{int(self.seq[node])}_{int(self.stage[node])}"

    @property
    def flat_index(self) -> npt.NDArray[np.integer[Any]]:
        """Per row: the flat position of its (node, dp, step) cell in a C-order dense array."""
        if self._flat is None:
            ns = len(self.steps)
            # numpy's own index type: a narrower index is converted on every scatter and gather
            # (twice their time), and the dense arrays are scattered and gathered many times
            # built in place in one array: each step of the expression over every row would
            # otherwise allocate (and page in) a row-sized temporary
            flat = self.node_of_row.astype(np.intp)
            flat *= self.dp
            flat += self.dp_of_row
            flat *= ns
            flat += self.step_of_row
            self._flat = flat
        return self._flat

    @property
    def successor_counts(self) -> npt.NDArray[np.int64]:
        """Per node: how many nodes depend on it (the simulator frees an end once all have read it)."""
        if self._succ is None:
            flat = [u for dv in self.deps for u in dv]
            self._succ = np.bincount(np.asarray(flat, dtype=np.int64), minlength=self.n_nodes)
        return self._succ

    @property
    def step_major_index(self) -> npt.NDArray[np.intp]:
        """Per row: the flat position of its cell in a C-order (n_steps, dp, n_nodes) array."""
        if self._step_major is None:
            idx = self.step_of_row.astype(np.intp)  # built in place, as ``flat_index``
            idx *= self.dp
            idx += self.dp_of_row
            idx *= self.n_nodes
            idx += self.node_of_row
            self._step_major = idx
        return self._step_major

    def dense(self, values: npt.NDArray[Any], fill: float = np.nan) -> npt.NDArray[np.float64]:
        """Scatter per-row values (n_ops,) into a (n_nodes, dp, n_steps) array.

        The rows are scattered into (step, dp, node) order first and then copied transposed: a
        (step, worker) block of rows (how every trace seen is stored) lands in one short run of
        nodes there, where in the node-major layout each of its rows is a cache miss of its own
        (twice the time at 15M rows)."""
        ns = len(self.steps)
        out = np.full(ns * self.dp * self.n_nodes, fill, dtype=np.float64)
        out[self.step_major_index] = values
        return np.ascontiguousarray(out.reshape(ns, self.dp, self.n_nodes).transpose(2, 1, 0))

    def step_row_bounds(self) -> npt.NDArray[np.intp] | None:
        """Per step index, the first of its rows, and the row count last, when the rows come in
        ascending step order (every trace seen stores its steps one after another); else None."""
        if self._step_bounds is None:
            sor = self.step_of_row
            ordered = len(sor) < 2 or bool((sor[1:] >= sor[:-1]).all())
            self._step_bounds = (
                np.searchsorted(sor, np.arange(len(self.steps) + 1)).astype(np.intp)
                if ordered
                else np.zeros(0, dtype=np.intp)
            )
        return self._step_bounds if len(self._step_bounds) else None

    def gather(self, dense: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """Per-row values from a (..., n_nodes, dp, n_steps) array (inverse of :meth:`dense`).

        A single (n_nodes, dp, n_steps) array is copied transposed to (step, dp, node) order first
        and read there, as :meth:`dense` writes: rows stored in (step, worker) blocks then read
        short runs of it instead of a cache miss each (half the time at 1.9M rows). With the rows
        in step order (``step_row_bounds``) one step is copied and read at a time: the same
        values, without a transposed copy of the whole array (a third of the page faults)."""
        if dense.ndim == 3:
            ns = len(self.steps)
            if dense.shape == (self.n_nodes, self.dp, ns):
                idx = self.step_major_index
                bounds = self.step_row_bounds()
                if bounds is None:
                    by_step = np.ascontiguousarray(dense.transpose(2, 1, 0)).reshape(-1)
                    return by_step[idx]
                out = np.empty(len(idx), dtype=dense.dtype)
                block = self.dp * self.n_nodes
                for k in range(ns):
                    a, b = int(bounds[k]), int(bounds[k + 1])
                    if a < b:
                        one = np.ascontiguousarray(dense[:, :, k].T).reshape(-1)  # (dp, n_nodes)
                        np.take(one, idx[a:b] - k * block, out=out[a:b])
                return out
        flat = dense.reshape(*dense.shape[:-3], -1)
        return flat[..., self.flat_index]


def _chain(edges: list[tuple[int, int]], nodes: list[int], first_after: list[int] | None = None) -> None:
    prev = list(first_after or [])
    for v in nodes:
        edges.extend((u, v) for u in prev)
        prev = [v]


def build_template(trace: Trace, *, join_batched_noops: bool = True) -> Template:
    """Rebuild the dependency graph of ``trace`` (see the module docstring).

    Raises ``TraceError`` when steps differ in their ops, P2P records cannot be paired, or the
    graph has a cycle once groups are contracted. A trace whose reader stated its dependencies
    (``trace.graph``, kernel-level traces) takes ``kernel_graph.template_from_explicit`` instead
    (``whatif.template_of`` picks the one that applies).
    """
    if trace.graph is not None:
        raise ValueError("this trace states its own dependency graph: use whatif.template_of")
    ops, meta = trace.ops, trace.meta
    src = trace.sources[0] if trace.sources else None
    dp, pp = meta.dp, meta.pp
    n_types = len(OPTYPES)
    # row maps in the op table's own narrow types (int32 / int16): no 64-bit copies of the columns
    steps_arr, step_of_row = dense_ids(ops.step, np.int32)
    n_steps = len(steps_arr)
    stage, optype, seq, dp_of_row = ops.stage, ops.optype, ops.seq_id, ops.dp_rank

    # --- node numbering from DP rank 0 / first step; every step must carry the same ops
    # per row: its (stage, op type) slot, and its (step, dp, stage, op type) cell; both in numpy's
    # index type, which bincount and every gather would otherwise widen them to, built in place
    slot = stage.astype(np.intp)
    slot *= n_types
    slot += optype
    key = step_of_row.astype(np.intp)
    key *= dp
    key += dp_of_row
    key *= pp * n_types
    key += slot
    counts = np.bincount(key, minlength=n_steps * dp * pp * n_types).reshape(n_steps, dp, pp, n_types)
    del key
    ref = counts[0, 0]
    diff = counts != ref
    if diff.any():
        t, d, s, o = (int(x) for x in np.argwhere(diff)[0])
        bad_rank = ops.rank[(step_of_row == t) & (dp_of_row == d) & (stage == s)]
        raise TraceError(
            f"step {int(steps_arr[t])} has {counts[t, d, s, o]} {OPTYPES[o]!r} ops on stage {s}, "
            f"dp_rank {d}, "
            f"but the first traced step ({int(steps_arr[0])}) has {ref[s, o]}: every step must carry the "
            "same ops",
            file=src,
            rank=int(bad_rank[0]) if len(bad_rank) else None,
            step=int(steps_arr[t]),
            op=OPTYPES[o],
        )
    base = np.concatenate([[0], np.cumsum(ref.reshape(-1))])[:-1].reshape(pp, n_types).astype(np.int32)
    n_nodes = int(ref.sum())
    bound = ref.reshape(-1)[slot]  # per row: how many ops its (stage, op type) has per step
    if len(seq) and (int(seq.min()) < 0 or bool((seq >= bound).any())):
        i = int(np.argmax((seq >= bound) | (seq < 0)))
        raise TraceError(
            f"seq_id {int(seq[i])} is not in 0..{int(ref[stage[i], optype[i]]) - 1}",
            file=src,
            rank=int(ops.rank[i]),
            step=int(ops.step[i]),
            op=OPTYPES[optype[i]],
        )
    del bound
    node_of_row = base.reshape(-1)[slot]
    node_of_row += seq
    del slot
    n_stage = np.repeat(np.arange(pp), ref.sum(axis=1))
    n_optype = np.concatenate([np.repeat(np.arange(n_types), ref[s]) for s in range(pp)]).astype(np.int64)
    n_seq = np.concatenate([np.arange(c) for c in ref.reshape(-1)]).astype(np.int64)

    # template attributes from dp 0, first step
    sel = np.flatnonzero((step_of_row == 0) & (dp_of_row == 0))
    t_start = np.empty(n_nodes)
    t_end = np.empty(n_nodes)
    t_mc = np.empty(n_nodes, dtype=np.int64)
    t_gmc = np.empty(n_nodes, dtype=np.int64)
    nid = node_of_row[sel]
    t_start[nid] = ops.start_ts[sel]
    t_end[nid] = ops.start_ts[sel] + ops.duration[sel]
    t_mc[nid] = ops.mc[sel]
    t_gmc[nid] = ops.gmc[sel]

    def node(s: int, o: int, q: int) -> int | None:
        if 0 <= q < ref[s, o]:
            return int(base[s, o] + q)
        return None

    def nodes_of(s: int, o: int) -> list[int]:
        return list(range(int(base[s, o]), int(base[s, o] + ref[s, o])))

    def observed_order(nodes: list[int]) -> list[int]:
        # the artifact's sort key: (start_ts, seq_id, optype name)
        return sorted(nodes, key=lambda v: (t_start[v], n_seq[v], OPTYPES[n_optype[v]]))

    compute_mc = t_mc[np.isin(n_optype, (FWD, BWD))]
    vpp = int(compute_mc.max()) + 1 if len(compute_mc) and compute_mc.max() >= 0 else meta.vpp
    notes: list[str] = []
    if vpp != meta.vpp:
        notes.append(f"the trace holds {vpp} model chunks per stage; the job metadata says vpp={meta.vpp}")
    total_gmc = vpp * pp

    edges: list[tuple[int, int]] = []
    valid_p2p: dict[tuple[int, int, int], int] = {}  # (stage, type, valid index) -> node
    no_op_nodes: list[int] = []
    present = set(int(o) for o in np.flatnonzero(ref.sum(axis=0)))
    use_dp = any(o in present for o in DP_TYPES)
    ovlp_dp = SEP in present

    def where(s: int, o: int) -> dict[str, Any]:
        return {
            "file": src,
            "step": int(steps_arr[0]),
            "op": OPTYPES[o],
            "rank": int(ops.rank[sel][(stage[sel] == s)][0]),
        }

    vpp_programs = _interleaved_programs(pp, vpp, nodes_of, t_start, t_mc, notes)
    for s in range(pp):
        comp = observed_order(nodes_of(s, FWD) + nodes_of(s, BWD))
        if not comp:
            raise TraceError(f"stage {s} has no forward/backward compute ops", **where(s, OPT))
        _chain(edges, comp)

        # P2P matching and no-op detection
        for o in P2P_TYPES:
            stream = observed_order(nodes_of(s, o))
            if not stream:
                continue
            _chain(edges, stream)
            ctype, _peer, delta = _P2P_INFO[o]
            cnodes = nodes_of(s, ctype)  # seq order = start order
            if not cnodes:
                raise TraceError(f"{OPTYPES[o]} ops on a stage without {OPTYPES[ctype]}", **where(s, o))
            last_c_start = max(t_start[c] for c in cnodes)
            first_c_end = min(t_end[c] for c in cnodes)
            is_recv = o in (FR, BR)

            def type1(
                v: int, _recv: bool = is_recv, _ls: float = last_c_start, _fe: float = first_c_end
            ) -> bool:
                return t_start[v] > _ls + EPS_MATCH if _recv else t_end[v] < _fe - EPS_MATCH

            cnt = sum(1 for v in stream if not type1(v))
            compute_id = 0
            if cnt != len(cnodes):
                if s not in (0, pp - 1) or not (cnt == 0 or cnt + 1 == len(cnodes)):
                    raise TraceError(
                        f"{cnt} matched {OPTYPES[o]} ops for {len(cnodes)} {OPTYPES[ctype]} ops "
                        f"on stage {s}: "
                        "P2P records cannot be paired with computes",
                        **where(s, o),
                    )
                if is_recv and cnt + 1 == len(cnodes):
                    compute_id = 1  # the first recv (a no-op) was not recorded
            valid = 0
            for v in stream:
                if type1(v):
                    no_op_nodes.append(v)
                    continue
                c = cnodes[compute_id]
                # the peer's global model chunk: a forward send feeds gmc+1, a forward recv comes from
                # gmc-1, and the reverse for backward; outside the model means the transfer never happened
                peer_gmc = int(t_gmc[c]) + delta
                type2 = peer_gmc < 0 or peer_gmc >= total_gmc
                if is_recv:
                    edges.append((v, c))
                    prev_c = node(s, ctype, int(n_seq[c]) - 1)
                    if prev_c is not None:
                        edges.append((prev_c, v))
                else:
                    edges.append((c, v))
                compute_id += 1
                if type2:
                    no_op_nodes.append(v)
                else:
                    valid_p2p[(s, o, valid)] = v
                    valid += 1

        # first backward send/recv wait for the forward two places before the first backward
        first_b = next((i for i, v in enumerate(comp) if n_optype[v] == BWD), None)
        if first_b is not None and first_b >= 2:
            if n_optype[comp[first_b - 1]] == FWD and n_optype[comp[first_b - 2]] == FWD:
                anchor = comp[first_b - 2]
                for o in (BR, BS):
                    v0 = node(s, o, 0)
                    if v0 is not None:
                        edges.append((anchor, v0))
            else:
                notes.append(
                    f"stage {s}: the two computes before the first backward are not forwards; "
                    "the 1F1B warm-up edge was not added"
                )

        # DP stream
        if use_dp:
            _chain(edges, observed_order(nodes_of(s, AG) + nodes_of(s, RS)))
            fwd_nodes = nodes_of(s, FWD)
            assigned: set[int] = set()
            ags = nodes_of(s, AG)
            for k in reversed(range(len(ags))):
                v = ags[k]
                mc = int(t_mc[v]) if t_mc[v] >= 0 else k
                if mc in assigned:
                    continue
                cands = [c for c in fwd_nodes if t_mc[c] == mc]
                if cands:
                    edges.append((v, min(cands, key=lambda c: t_start[c])))
                assigned.add(mc)
            if ovlp_dp:
                bwd_nodes = nodes_of(s, BWD)
                assigned = set()
                rss = nodes_of(s, RS)
                for k, v in enumerate(rss):
                    mc = int(t_mc[v]) if t_mc[v] >= 0 else vpp - 1 - k
                    if mc in assigned:
                        continue
                    cands = [c for c in bwd_nodes if t_mc[c] == mc]
                    if cands:
                        edges.append((max(cands, key=lambda c: t_end[c]), v))
                    assigned.add(mc)

        # tail
        last_compute = max(comp, key=lambda v: t_end[v])
        gcs = nodes_of(s, GC)
        _chain(edges, gcs, [last_compute])
        after_gc = [gcs[-1]] if gcs else [last_compute]
        emb = nodes_of(s, EMB) if s in (0, pp - 1) else []
        head = nodes_of(s, LN) + emb
        if not use_dp:
            tail = head + nodes_of(s, CLIP) + nodes_of(s, OPT)
            _chain(edges, tail, after_gc)
        elif ovlp_dp:
            rss = nodes_of(s, RS)
            tail = head + nodes_of(s, SEP) + nodes_of(s, CLIP) + nodes_of(s, OPT)
            _chain(edges, tail, after_gc + rss[-1:])
        else:
            tail = head + nodes_of(s, RS) + nodes_of(s, CLIP) + nodes_of(s, OPT)
            _chain(edges, tail, after_gc)
        if s not in (0, pp - 1) and ref[s, EMB]:
            # an embedding all-reduce on a middle stage joins nothing; keep it in the stage's tail
            _chain(edges, nodes_of(s, EMB), after_gc)

    # --- groups
    twins: dict[int, int] = {}
    if vpp_programs and not _programs_agree(vpp_programs, no_op_nodes, notes):
        vpp_programs = {}
    if vpp_programs:
        _add_program_edges(edges, vpp_programs, nodes_of, n_optype, t_end)
    if join_batched_noops and vpp_programs:
        twins = _program_twins(vpp_programs)
    elif join_batched_noops:
        # a no-op record split from a batched P2P record shares its start and duration with a valid
        # op of the other direction on the same worker: it waited for that op's peer, so it ends
        # with that op's group instead of keeping the wait as its own transfer time
        # (one look-up per no-op in an index by worker and timing, not a scan of every P2P node)
        same_timing: dict[tuple[int, float, float], list[int]] = {}
        for u in valid_p2p.values():
            same_timing.setdefault((int(n_stage[u]), float(t_start[u]), float(t_end[u])), []).append(u)
        for v in no_op_nodes:
            candidates = same_timing.get((int(n_stage[v]), float(t_start[v]), float(t_end[v])), [])
            twin = next((u for u in candidates if n_optype[u] != n_optype[v]), None)
            if twin is not None:
                twins[v] = twin

    def build_groups(join: bool) -> tuple[npt.NDArray[np.int64], list[list[int]], list[bool]]:
        groups: list[list[int]] = []
        dp_sync: list[bool] = []
        group = np.full(n_nodes, -1, dtype=np.int64)

        def add_group(members: list[int], sync: bool) -> None:
            gid = len(groups)
            groups.append(members)
            dp_sync.append(sync)
            for m in members:
                group[m] = gid

        for (s, o, k), v in sorted(valid_p2p.items()):
            _, peer_type, delta = _P2P_INFO[o]
            if o not in (FS, BS):
                continue  # each pair is added once, from its sender
            ps = (s + delta) % pp
            peer = valid_p2p.get((ps, peer_type, k))
            if peer is None:
                raise TraceError(
                    f"{OPTYPES[o]} #{k} (valid index) on stage {s} has no {OPTYPES[peer_type]} peer "
                    f"on stage {ps}",
                    **where(s, o),
                )
            add_group([v, peer], False)
        for (s, o, k), v in sorted(valid_p2p.items()):
            if o in (FR, BR) and group[v] < 0:
                _, peer_type, delta = _P2P_INFO[o]
                raise TraceError(
                    f"{OPTYPES[o]} #{k} (valid index) on stage {s} has no {OPTYPES[peer_type]} peer on stage "
                    f"{(s + delta) % pp}",
                    **where(s, o),
                )
        for v in no_op_nodes:
            if join and v in twins:
                gid = int(group[twins[v]])
                groups[gid].append(v)
                group[v] = gid
            else:
                add_group([v], False)
        for s in range(pp):
            for o in DP_TYPES:
                for v in nodes_of(s, o):
                    add_group([v], True)
        # embedding all-reduce: first and last stage of one replica, one group per seq_id
        emb_stages = sorted({0, pp - 1})
        for q in range(int(ref[:, EMB].max()) if ref[:, EMB].any() else 0):
            members = [m for m in (node(s, EMB, q) for s in emb_stages) if m is not None]
            if members:
                add_group(members, False)
        for s in range(1, pp - 1):
            for v in nodes_of(s, EMB):
                add_group([v], False)
        for q in range(int(ref[:, CLIP].max()) if ref[:, CLIP].any() else 0):
            members = [m for m in (node(s, CLIP, q) for s in range(pp)) if m is not None]
            add_group(members, True)

        return group, groups, dp_sync

    deps: list[list[int]] = [[] for _ in range(n_nodes)]
    seen: set[tuple[int, int]] = set()
    for u, v in edges:
        if (u, v) not in seen and u != v:
            seen.add((u, v))
            deps[v].append(u)

    def name_of(v: int) -> str:
        return _node_name(n_stage, n_optype, n_seq, v)

    group, groups, dp_sync = build_groups(True)
    try:
        order = _topo_order(n_nodes, deps, group, groups, name_of, src)
    except TraceError:
        if not twins:
            raise
        group, groups, dp_sync = build_groups(False)
        order = _topo_order(n_nodes, deps, group, groups, name_of, src)
        twins.clear()
        notes.append("batched no-op P2P records kept as their own groups (joining them made a cycle)")
    if twins:
        notes.append(
            f"{len(twins)} no-op P2P records of the template split from batched records finish with "
            "their twin's group"
        )
    rendezvous: list[int] = []
    calls: list[list[int]] = []
    if vpp_programs and len(vpp_programs) == pp:
        calls = [c for p in vpp_programs.values() for c in p.calls]
        rendezvous = sorted({int(group[v]) for c in calls for v in c})
    return Template(
        n_nodes=n_nodes,
        stage=n_stage.astype(np.int64),
        optype=n_optype,
        seq=n_seq,
        deps=deps,
        group=group,
        groups=groups,
        group_dp_sync=dp_sync,
        order=order,
        node_of_row=node_of_row,
        dp_of_row=dp_of_row,
        step_of_row=step_of_row,
        steps=[int(x) for x in steps_arr],
        dp=dp,
        pp=pp,
        vpp=vpp,
        no_ops=len(no_op_nodes),
        notes=notes,
        rendezvous_groups=rendezvous,
        rendezvous_calls=calls,
    )


def _interleaved_programs(
    pp: int,
    vpp: int,
    nodes_of: Any,
    t_start: npt.NDArray[np.float64],
    t_mc: npt.NDArray[np.int64],
    notes: list[str],
) -> dict[int, interleaved.StageProgram]:
    """Per stage, its nodes laid on Megatron's interleaved program (vpp > 1 and pp > 1 only).

    All stages or none: when one stage does not fit, the graph keeps the artifact's matching rules
    for every stage and a note says why."""
    if vpp <= 1 or pp <= 1:
        return {}
    out: dict[int, interleaved.StageProgram] = {}
    for s in range(pp):
        got = interleaved.stage_program(s, pp, vpp, nodes_of, t_start, t_mc)
        if isinstance(got, str):
            notes.append(
                f"stage {s} does not follow Megatron's interleaved 1F1B program ({got}); the "
                "artifact's P2P matching rules are used instead"
            )
            return {}
        out[s] = got
    return out


def _add_program_edges(
    edges: list[tuple[int, int]],
    programs: dict[int, interleaved.StageProgram],
    nodes_of: Any,
    n_optype: npt.NDArray[np.int64],
    t_end: npt.NDArray[np.float64],
) -> None:
    """Make each stage run its interleaved program: every call after the whole previous one (a
    batched call blocks until all its transfers are done), the first call after the stage's
    all-gathers, and the step's tail after the last call instead of after the last compute.

    The artifact's matching edges stay: the program implies every one of them."""
    pipeline_types = (FWD, BWD, *P2P_TYPES)
    last_compute = {
        s: max(nodes_of(s, FWD) + nodes_of(s, BWD), key=lambda v: t_end[v]) for s in programs
    }
    stage_of_last = {v: s for s, v in last_compute.items()}
    tail_heads: dict[int, list[int]] = {s: [] for s in programs}
    for u, v in edges:
        s = stage_of_last.get(u)
        if s is not None and int(n_optype[v]) not in pipeline_types:
            tail_heads[s].append(v)
    for s, p in programs.items():
        edges.extend(p.edges)
        edges.extend((a, v) for a in nodes_of(s, AG) for v in p.first)
        edges.extend((u, v) for u in p.last for v in tail_heads[s])


def _programs_agree(
    programs: dict[int, interleaved.StageProgram], no_op_nodes: list[int], notes: list[str]
) -> bool:
    """Whether the program's no-op slots are exactly the no-op records the matching rules found."""
    no_ops = set(no_op_nodes)
    for s, p in programs.items():
        bad = [v for v, real in p.real.items() if real == (v in no_ops)]
        if bad:
            notes.append(
                f"stage {s}: {len(bad)} P2P records disagree with the interleaved program's no-op "
                "slots; the artifact's P2P matching rules are used instead"
            )
            return False
    return True


def _program_twins(programs: dict[int, interleaved.StageProgram]) -> dict[int, int]:
    """No-op slot -> the first real transfer of its batched call (it ends with that call)."""
    twins: dict[int, int] = {}
    for p in programs.values():
        for call in p.calls:
            real = [v for v in call if p.real[v]]
            if real:
                twins.update((v, real[0]) for v in call if not p.real[v])
    return twins


def _node_name(
    stage: npt.NDArray[np.int64], optype: npt.NDArray[np.int64], seq: npt.NDArray[np.int64], v: int
) -> str:
    return f"{OPTYPES[int(optype[v])]}_{int(seq[v])}_{int(stage[v])}"


def _topo_order(
    n_nodes: int,
    deps: list[list[int]],
    group: npt.NDArray[np.int64],
    groups: list[list[int]],
    name: Any,
    src: str | None,
) -> list[list[int]]:
    """Kahn's order over super-nodes (a group contracted to one node); raises on a cycle."""
    sid = np.where(group >= 0, group, len(groups) + np.arange(n_nodes))
    # super-node ids are compacted: groups first, then local ops
    uniq, sup = np.unique(sid, return_inverse=True)
    n_sup = len(uniq)
    members: list[list[int]] = [[] for _ in range(n_sup)]
    for v in range(n_nodes):
        members[int(sup[v])].append(v)
    succ: list[set[int]] = [set() for _ in range(n_sup)]
    indeg = np.zeros(n_sup, dtype=np.int64)
    for v in range(n_nodes):
        sv = int(sup[v])
        for u in deps[v]:
            su = int(sup[u])
            if su != sv and sv not in succ[su]:
                succ[su].add(sv)
                indeg[sv] += 1
    queue = deque(int(x) for x in np.flatnonzero(indeg == 0))
    order: list[list[int]] = []
    while queue:
        x = queue.popleft()
        order.append(members[x])
        for y in succ[x]:
            indeg[y] -= 1
            if indeg[y] == 0:
                queue.append(y)
    if len(order) != n_sup:
        stuck = np.flatnonzero(indeg > 0)
        cyc = _find_cycle(stuck, succ)
        names = [
            name(members[c][0])
            if len(members[c]) == 1
            else "{" + ", ".join(name(m) for m in members[c]) + "}"
            for c in cyc
        ]
        raise TraceError(
            f"the dependency graph has a cycle: {' -> '.join(names)}", file=src, op=name(members[cyc[0]][0])
        )
    return order


def _find_cycle(stuck: npt.NDArray[np.int64], succ: list[set[int]]) -> list[int]:
    """One cycle among the super-nodes left over by Kahn's algorithm."""
    left = set(int(x) for x in stuck)
    start = int(stuck[0])
    path: list[int] = []
    pos: dict[int, int] = {}
    x = start
    while x not in pos:
        pos[x] = len(path)
        path.append(x)
        x = next(y for y in succ[x] if y in left)
    return [*path[pos[x] :], x]


def template_from_graph(
    deps: list[list[int]],
    groups: list[list[int]],
    dp_sync: list[bool],
    *,
    dp: int = 1,
    n_steps: int = 1,
    pp: int = 1,
) -> Template:
    """A template from an explicit graph (tests, custom models): nodes ``0..len(deps)-1``, all on
    stage 0 and typed ``forward-compute``; row maps enumerate every (node, dp, step) cell in C order.
    Raises ``TraceError`` on a cycle among super-nodes."""
    n = len(deps)
    group = np.full(n, -1, dtype=np.int64)
    for g, members in enumerate(groups):
        for m in members:
            if group[m] >= 0:
                raise ValueError(f"node {m} is in two groups")
            group[m] = g
    nodes = np.arange(n, dtype=np.int64)
    order = _topo_order(n, deps, group, groups, lambda v: f"node{v}", None)
    cells = np.indices((n, dp, n_steps)).reshape(3, -1).astype(np.int64)
    return Template(
        n_nodes=n,
        stage=np.zeros(n, dtype=np.int64),
        optype=np.full(n, FWD, dtype=np.int64),
        seq=nodes,
        deps=[list(d) for d in deps],
        group=group,
        groups=[list(g) for g in groups],
        group_dp_sync=list(dp_sync),
        order=order,
        node_of_row=cells[0],
        dp_of_row=cells[1],
        step_of_row=cells[2],
        steps=list(range(n_steps)),
        dp=dp,
        pp=pp,
        vpp=1,
    )
