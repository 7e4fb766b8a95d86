"""The interleaved (virtual-pipeline) 1F1B schedule as Megatron-LM executes it, for the dependency graph.

Megatron's ``forward_backward_pipelining_with_interleaving`` runs, on stage ``s`` of ``p`` with ``v``
model chunks and ``m`` microbatches (``m`` a multiple of ``p``; ``n = m·v`` forwards and backwards):

- chunk order: the k-th forward runs chunk ``(k mod p·v) // p``, the k-th backward chunk
  ``v - 1 -`` that (microbatches go through the chunks in groups of ``p``);
- warm-up: ``n`` forwards when ``m == p`` (all warm-up), else ``min((p - s - 1)·2 + (v - 1)·p, n)``;
- one blocking ``recv_forward`` before the first forward; after every warm-up forward one batched
  call ``send_forward_recv_forward`` (the last warm-up call also posts the first backward receive);
  in the steady state one forward, one backward, then one batched call that sends both outputs and
  posts both receives; after every cool-down backward ``send_backward_recv_backward``;
- each call *blocks* until all its transfers are done, and a transfer needs both sides posted
  (NCCL rendezvous), so a send holds the next compute until its receiver has posted;
- the pipeline wraps around: stage ``p-1`` sends chunk ``c`` activations to stage 0's chunk ``c+1``
  (and gradients back the other way); transfers across the model's ends (stage 0 chunk 0 receives
  no activation, stage ``p-1``'s last chunk sends none, mirrored for gradients) are *no-op slots*,
  recorded with the call's timing but moving nothing.

:func:`program` lists that sequence of calls; :func:`stage_program` maps a stage's template nodes
onto it and returns the edges that make the graph run it (every call waits for the whole previous
call), the batched calls, and whether the trace fits (record counts, chunk ids, start order).
:func:`rendezvous_transfers` measures a transfer as the pair's completion: both sides of a P2P
pair finish together, while each side records its whole batched call, which may end later waiting
for another transfer of the call.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from diagnosers.model import OPTYPE_CODE, JobMeta

FWD = OPTYPE_CODE["forward-compute"]
BWD = OPTYPE_CODE["backward-compute"]
FS, FR = OPTYPE_CODE["forward-send"], OPTYPE_CODE["forward-recv"]
BS, BR = OPTYPE_CODE["backward-send"], OPTYPE_CODE["backward-recv"]
ORDER_TOL = 5e-5  # s; start-time tolerance when checking the trace follows the program (clock noise)

# One program element: a compute ("c", optype, k) or a P2P call [(optype, slot, real), ...].
Compute = tuple[int, int]  # (FWD | BWD, index among that direction's computes)
Slot = tuple[int, int, bool]  # (P2P optype, index among that type's records, moves data?)


@dataclass
class Element:
    """A compute, or a (batched) P2P call with its slots in record order."""

    compute: Compute | None = None
    slots: list[Slot] = field(default_factory=list)


def chunk_of(k: int, pp: int, vpp: int, forward: bool) -> int:
    """Model chunk of the k-th forward (or backward) on a stage."""
    c = (k % (pp * vpp)) // pp
    return c if forward else vpp - 1 - c


def warmup_count(stage: int, pp: int, vpp: int, m: int) -> int:
    """Forwards before the first backward on ``stage`` (Megatron's num_warmup_microbatches)."""
    total = m * vpp
    if m == pp:
        return total
    return min((pp - stage - 1) * 2 + (vpp - 1) * pp, total)


def program(stage: int, pp: int, vpp: int, m: int) -> list[Element]:
    """The calls of one interleaved 1F1B step on ``stage``, in order (see the module docstring)."""
    s, total = stage, m * vpp
    all_warmup = m == pp
    warmup = warmup_count(s, pp, vpp, m)

    def real(o: int, k: int) -> bool:
        fwd = o in (FS, FR)
        c = chunk_of(k, pp, vpp, fwd)
        if o in (FS, BR):  # towards the model's output end
            return not (s == pp - 1 and c == vpp - 1)
        return not (s == 0 and c == 0)  # FR, BS: towards its input end

    def call(*parts: tuple[int, int]) -> Element:
        return Element(slots=[(o, k, real(o, k)) for o, k in parts])

    out = [call((FR, 0))]
    for k in range(warmup):
        out.append(Element(compute=(FWD, k)))
        parts = [(FS, k)]
        if k + 1 < total:
            parts.append((FR, k + 1))
        if k == warmup - 1 and not all_warmup:
            parts.append((BR, 0))
        out.append(call(*parts))
    for i in range(total - warmup):
        fk = i + warmup
        out.append(Element(compute=(FWD, fk)))
        out.append(Element(compute=(BWD, i)))
        parts = [(FS, fk), (BS, i)]
        if fk + 1 < total:
            parts.append((FR, fk + 1))
        parts.append((BR, i + 1))
        out.append(call(*parts))
    if all_warmup:
        out.append(call((BR, 0)))
    for bk in range(total - warmup, total):
        out.append(Element(compute=(BWD, bk)))
        parts = [(BS, bk)]
        if bk + 1 < total:
            parts.append((BR, bk + 1))
        out.append(call(*parts))
    return out


@dataclass
class StageProgram:
    """A stage's template nodes laid on the interleaved program."""

    edges: list[tuple[int, int]]
    calls: list[list[int]]  # nodes of each P2P call, in program order
    real: dict[int, bool]  # P2P node -> whether its slot moves data
    first: list[int]  # nodes of the first element (wait for the stage's all-gathers)
    last: list[int]  # nodes of the last element (the step's tail waits for them)


def stage_program(
    stage: int,
    pp: int,
    vpp: int,
    nodes_of: Callable[[int, int], list[int]],
    start: npt.NDArray[np.float64],
    mc: npt.NDArray[np.int64],
) -> StageProgram | str:
    """Map stage ``stage``'s compute and P2P nodes onto :func:`program`, or say why they do not fit.

    ``nodes_of(stage, optype)`` lists a type's nodes in seq_id (start) order; ``start`` and ``mc`` are
    the template's per-node start time and model chunk. Fits when: forwards and backwards are
    ``m·v`` each with ``m`` a multiple of ``pp``; each P2P type has one record per slot (stage 0 may
    lack its first forward-recv, a no-op slot); recorded chunks (``mc`` ≥ 0) match the chunk order;
    and starts follow the program (rows of one call together, calls in order, within 50 µs).
    """
    fwd, bwd = nodes_of(stage, FWD), nodes_of(stage, BWD)
    if len(fwd) != len(bwd) or len(fwd) % vpp:
        return f"{len(fwd)} forwards and {len(bwd)} backwards are not m x {vpp} chunks each"
    m = len(fwd) // vpp
    if m % pp or m == 0:
        return f"{m} microbatches is not a multiple of pp={pp}"
    total = m * vpp
    p2p = {o: nodes_of(stage, o) for o in (FS, FR, BS, BR)}
    offset = {o: 0 for o in p2p}
    if stage == 0 and len(p2p[FR]) == total - 1:
        offset[FR] = -1  # the first forward recv (a no-op slot) was not recorded
    for o, ns in p2p.items():
        if len(ns) != total + offset[o]:
            return f"{len(ns)} records of P2P type {o} for {total} slots"
    for k in range(total):
        for nodes, forward in ((fwd, True), (bwd, False)):
            v = nodes[k]
            if mc[v] >= 0 and mc[v] != chunk_of(k, pp, vpp, forward):
                want = chunk_of(k, pp, vpp, forward)
                return f"compute {k} runs chunk {int(mc[v])}, the interleaved order says {want}"

    elements: list[list[int]] = []
    calls: list[list[int]] = []
    real: dict[int, bool] = {}
    for el in program(stage, pp, vpp, m):
        if el.compute is not None:
            o, k = el.compute
            elements.append([(fwd if o == FWD else bwd)[k]])
            continue
        members = []
        for o, k, is_real in el.slots:
            j = k + offset[o]
            if j < 0:
                if is_real:
                    return "a missing P2P record would have moved data"
                continue
            v = p2p[o][j]
            members.append(v)
            real[v] = is_real
        if members:
            elements.append(members)
            calls.append(members)
    edges: list[tuple[int, int]] = []
    prev_max = -np.inf
    for a, b in itertools.pairwise(elements):
        edges.extend((u, v) for u in a for v in b)
    for el_nodes in elements:
        st = start[el_nodes]
        if st.min() < prev_max - ORDER_TOL or (len(el_nodes) > 1 and st.max() - st.min() > ORDER_TOL):
            return "recorded start times do not follow the interleaved program"
        prev_max = float(st.max())
    return StageProgram(edges=edges, calls=calls, real=real, first=elements[0], last=elements[-1])


WITNESS_TOL = 1e-4  # s; two calls "end together" within this (per-host clock skew is ~20 µs)


def rendezvous_transfers(
    groups: list[list[int]],
    which: list[int],
    calls: list[list[int]],
    start: npt.NDArray[np.float64],
    end: npt.NDArray[np.float64],
    orig: npt.NDArray[np.float64],
    clamp: float,
) -> None:
    """Set the transfer time of every member of the P2P groups ``which`` to its pair's own, in place.

    ``start``/``end``/``orig`` are ``(n_nodes, dp, steps)``; ``calls`` lists the nodes of each
    batched call. Both sides of a pair finish together, at ``max(posts) + transfer``, but each
    records the end of its whole call, which waits for the slowest transfer of the call. So, per
    (dp, step) cell:

    1. a pair's transfer is at most ``min(its two calls' ends) - max(member starts)`` (the bound);
    2. each call's end is explained by one of its pairs, the *witness*: among the pairs whose other
       call ends no earlier (within 100 µs), the one posted last (the smallest implied transfer);
       a witness's transfer is ``call end - max(member starts)``, exact for the transfer that ended
       the call;
    3. a pair that witnesses neither of its calls finished unobserved inside both: it gets the
       typical (median) bound of the job's pairs, capped by its own bound.

    Re-simulating with launch delays reproduces every call's end (its witness ends there, no pair
    ends later). Values at or below ``-clamp`` are 0.
    """
    if not which:
        return
    call_of: dict[int, int] = {v: c for c, nodes in enumerate(calls) for v in nodes}
    # every member of every group, flat, for one reduceat per statistic
    members = [groups[g] for g in which]
    flat = np.fromiter((v for ms in members for v in ms), dtype=np.int64)
    offsets = np.cumsum([0] + [len(ms) for ms in members[:-1]])
    eff = np.maximum.reduceat(start[flat], offsets, axis=0)  # (n_groups, dp, S)
    tr = np.minimum.reduceat(end[flat], offsets, axis=0) - eff  # singleton groups keep their own
    # pairs whose members sit in two calls, and their (call, other call) incidences
    pair_idx, side_a, side_b = [], [], []
    for i, ms in enumerate(members):
        cs = sorted({call_of[v] for v in ms if v in call_of})
        if len(ms) >= 2 and len(cs) == 2:
            pair_idx.append(i)
            side_a.append(cs[0])
            side_b.append(cs[1])
    if pair_idx:
        pi = np.asarray(pair_idx)
        inc_call = np.concatenate([side_a, side_b])
        inc_other = np.concatenate([side_b, side_a])
        inc_pair = np.concatenate([pi, pi])
        end_c = end[[nodes[0] for nodes in calls]]  # (n_calls, dp, S)
        inc_eff = eff[inc_pair]
        bound = np.minimum(end_c[side_a], end_c[side_b]) - eff[pi]
        cand = end_c[inc_other] >= end_c[inc_call] - WITNESS_TOL
        # per call, its incidences in pair order (one per P2P type: at most 4), padded with n_inc
        n_inc = len(inc_call)
        width = int(np.bincount(inc_call, minlength=len(calls)).max())
        table = np.full((len(calls), width), n_inc, dtype=np.int64)
        fill = np.zeros(len(calls), dtype=np.int64)
        for k in np.argsort(np.concatenate([np.arange(len(pi))] * 2), kind="stable"):
            c = int(inc_call[k])
            table[c, fill[c]] = k
            fill[c] += 1
        pad = np.full((1, *eff.shape[1:]), -np.inf)
        score = np.concatenate([np.where(cand, inc_eff, -np.inf), pad])[table]  # (n_calls, 4, dp, S)
        plain = np.concatenate([inc_eff, pad])[table]
        pick = np.where(np.isfinite(score).any(axis=1), score.argmax(axis=1), plain.argmax(axis=1))
        witness = np.take_along_axis(table[:, :, None, None], pick[:, None], axis=1)[:, 0]
        is_w = witness[inc_call] == np.arange(n_inc)[:, None, None]
        implied = np.where(is_w, end_c[inc_call] - inc_eff, -np.inf)
        got = np.maximum(implied[: len(pi)], implied[len(pi) :])
        typical = float(np.median(bound))
        tr[pi] = np.where(np.isfinite(got), got, np.minimum(bound, typical))
    tr[tr <= -clamp] = 0.0
    orig[flat] = tr[np.repeat(np.arange(len(members)), [len(ms) for ms in members])]


def meta_notes(meta: JobMeta, mc: npt.NDArray[np.integer], is_compute: npt.NDArray[np.bool_]) -> list[str]:
    """Fill ``meta.vpp`` from the trace's chunk ids when the metadata left it at 1, and say what an
    interleaved job's analysis assumes about its layers (in place; returns the reader's notes)."""
    notes: list[str] = []
    chunks = int(mc[is_compute].max()) + 1 if is_compute.any() else 1
    if meta.vpp == 1 and chunks > 1 and meta.layers_per_chunk is None:
        meta.vpp = chunks
        notes.append(f"vpp_size not given: {chunks} model chunks per stage, from the trace's chunk ids")
    if meta.vpp > 1 and meta.layers_per_chunk is None:
        if meta.layers_per_stage is not None:
            notes.append(
                f"layers per model chunk unknown: the chunk repartition assumes each stage's layers "
                f"split evenly over its {meta.vpp} chunks (give layers_per_chunk in the meta file)"
            )
        else:
            notes.append(
                f"layers per stage and per model chunk unknown: the chunk repartition assumes 8 per "
                f"stage split evenly over its {meta.vpp} chunks (give layers_per_chunk in the meta file)"
            )
    return notes
