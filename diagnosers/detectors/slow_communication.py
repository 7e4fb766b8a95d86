"""Slow communication: transfers on a link or a group are slow while compute is normal
(METHOD.md A6 and the op-type attribution of A5).

Works on transfer durations (end minus the last member's start, METHOD.md A3), so waiting for a
slow peer does not count as slow communication. Evidence, all of which must hold:
- what-if: idealising every communication op (or putting only it back into the ideal run, the
  larger counts) explains at least ``MIN_SHARE`` of the slowdown, and more than all compute does —
  unless a localised candidate explains a real share of its own (``base.real_share``: its own
  ``MIN_SHARE``, or beside a larger cause ``SECONDARY_EFFECT``, 5%, of the ideal step, the compute
  detectors' test for a secondary cause);
- localisation: candidate groups — each PP link (DP rank d, stages s and s+1), each stage's DP
  group, each DP replica's embedding all-reduce group, and each worker or host whose
  point-to-point transfers are at least twice as slow as the typical worker's (with the
  collectives it takes part in, both ends of its P2P transfers, and every row of a batched P2P
  call it is part of) — ranked by excess transfer time; the best few are idealised one by one.
  The most specific candidate (fewest ops) removing at least 90% of what the best one removes is
  the location (a stage's DP group yields to a member whose own P2P transfers are slow and that
  explains as much: a collective runs at its slowest member's pace), when that is at least half of
  what fixing all communication does and its own ``MIN_SHARE``; otherwise the slow communication
  is job-wide, reported only when the job is straggling (S >= 1.1) and its excess transfer time
  is not mostly in one step (``transient``: a whole-job stall): uniformly jittery transfers alone
  are not a straggler.

With batched P2P calls (1F1B's steady state, interleaved schedules) a transfer's recorded time
also holds the wait for the peer's compute, so only the ``rem`` view counts — except for a
candidate that *stands out* (``stands_out``): a link whose transfers average at least twice the
type's typical and twice its peer links' (the other DP ranks' links between the same stages), or
a worker whose P2P transfers do the same against its stage peers while the other ends of those
transfers record them slow too (``far_end_agrees``: a slow NIC lengthens a transfer at both ends,
a descheduled process only its own records), with its ends' own compute normal against their
stage peers. Waits spread with compute noise over every link; a slow link's
time stays on it. For such a candidate the larger of ``rem`` and ``add`` counts, as everywhere
else, and it may carry the finding when idealising all communication (``rem``) does not reach
``MIN_SHARE``: on a busy host compute noise sits on the critical path in most steps, so removing
a slow link alone removes little although putting it back into the ideal run costs its share.
A group of collectives (a stage's DP group, a replica's embedding group) holds no wait in its
transfer times with batched calls either (a collective's time counts from its last member's
arrival): one whose collectives average ``GROUP_STANDOUT`` times its peer groups'
(``group_stands_out``) takes the larger of ``rem`` and ``add`` too and may carry the finding so,
and the put-back of all DP and embedding collectives (``collective_put_back``) lets the job past
the first share test when all communication's ``rem`` is small (a slow DP group beside a
sequence-length imbalance whose stragglers leave the group's collective off the critical path).

A link direction may also stand out by its *send floor* (``floor_candidates``): the fastest of its
sends that ride alone in their P2P call (``SEND_FLOOR_QUANTILE``) at least ``STANDOUT`` times its
peer links' in the same direction. Batched waits and a busy host's pauses lengthen some transfers;
a slow link, NIC port or a sender stalling in each send lengthens every one, its fastest too. Such
a direction is tested on that constant alone (``floor_shares``): adding it to each of its
transfers in the ideal run (or taking it off the measured ones) must account for ``MIN_SHARE`` of
the slowdown and slow the ideal job by ``DECOMPOSE_THRESHOLD`` on its own, or slow it by
``CLEAR_ALONE`` (5%) on its own; then it is a candidate that stands out, persistent by
construction. Its receiver must wait for those transfers too (``receiver_waits``: its lone
receives' floor stands out of its peer links' as well); sends long on the sender's side alone are
a sender waiting for a late receiver.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from diagnosers.detectors.base import (
    MIN_SHARE,
    CauseMatch,
    Probe,
    TraceStats,
    categories_for,
    confidence,
    real_share,
    rounded,
)
from diagnosers.detectors.faulty_machine import worker_order_statistic
from diagnosers.detectors.peers import median_of_others, noise_floor, peer_ratio
from diagnosers.detectors.registry import register, register_plan
from diagnosers.model import COMM_OPTYPES, OPTYPE_CODE, OPTYPES
from diagnosers.npplain import median, percentile, unique
from diagnosers.vocab import DECOMPOSE_THRESHOLD, CauseId, Pattern, Resource, Spatial, Temporal

if TYPE_CHECKING:
    from diagnosers.report_view import Report

COMM_CODES = np.array(sorted(OPTYPE_CODE[n] for n in COMM_OPTYPES), dtype=np.int16)
DP_CODES = np.array(
    [OPTYPE_CODE[n] for n in ("params-all-gather", "grads-reduce-scatter", "separate-grads-all-reduce")],
    dtype=np.int16,
)
FS, FR, BS, BR = (OPTYPE_CODE[n] for n in ("forward-send", "forward-recv", "backward-send", "backward-recv"))
EMB = OPTYPE_CODE["embedding-grads-all-reduce"]
MAX_PROBED = 8
# A candidate stands out when its transfers average at least twice its peers' (the detector's
# "elevated" convention, used for workers and hosts above); its ends' compute is normal when its
# typical ratio to the stage peers stays under OWN_Z standard errors of the noise floor or 2%.
STANDOUT = 2.0
# ... and a worker's slow transfers are on the wire only when their other ends record them slow
# too: at least sqrt(STANDOUT) times their peers' (halfway, on the log scale, to a standing-out
# link; a partner's records also hold its own noise).
FAR_END = float(np.sqrt(STANDOUT))
OWN_Z = 3.0
MIN_EXCESS = 0.02
# A candidate is a transient stall when one step holds more than half its excess transfer time
# (``transient``), judged from three traced steps on.
TRANSIENT_SHARE = 0.5
TRANSIENT_MIN_STEPS = 3
# A link direction's send floor (``send_floors``): this lower quantile (an order statistic, no
# interpolation) of the transfer times of its sends that ride alone in their P2P call.
SEND_FLOOR_QUANTILE = 0.1
# ... and tested on the constant it adds: a share of its own (``MIN_SHARE``) with a slowdown alone
# the method would decompose (``DECOMPOSE_THRESHOLD``), or alone a clear cause: slowing the ideal
# job by at least 5% by itself, whatever else slows it (in a job slowed 1.4x by host noise a 6%
# link holds a seventh of the gap).
CLEAR_ALONE = 1.05

# per op: the id of its batched P2P call (``batch_ids``; -1 off P2P), int32 where the rows fit
BatchIds = npt.NDArray[np.signedinteger[Any]]


# Candidate groups made of collectives only (``candidate_groups``' names): their transfer times
# count from the last member's arrival, so they hold no wait even with batched P2P calls ...
COLLECTIVE_GROUPS = ("dp group", "embedding group")
# ... and one takes its put-back view there only when its collectives average at least this many
# times its peer groups' (the other stages' DP groups, the other replicas' embedding groups):
# halfway, on the log scale, to standing out (``STANDOUT``). On a busy host every group's
# transfers hold the host's noise (seen healthy 3x2 recordings: 0.75-1.32x); the seen slow DP
# groups of the synthetic sets stand 2.0x and more.
GROUP_STANDOUT = float(np.sqrt(STANDOUT))


def group_stands_out(stats: TraceStats, transfer: npt.NDArray[np.float64], name: str,
                     cells: list[tuple[int, int]]) -> bool:
    """Whether a candidate group of collectives (``COLLECTIVE_GROUPS``) averages at least
    ``GROUP_STANDOUT`` times the median of its peer groups' mean transfer times: a stage's DP group
    against the other stages' DP groups, a replica's embedding group against the other replicas'.
    False for any other candidate, or with no peer group. The groups' means over the probe's
    transfer times are made once per trace statistics (every stage's DP group asks the same)."""
    if name.startswith("dp group"):
        by_stage, own = True, cells[0][1]
    elif name.startswith("embedding group"):
        by_stage, own = False, cells[0][0]
    else:
        return False
    probe = stats.probe
    if probe is not None and transfer is probe.original:
        means = stats.shared(("slow-communication group means", by_stage),
                             lambda: _group_means(stats, transfer, by_stage))
    else:
        means = _group_means(stats, transfer, by_stage)
    if not means:
        return False
    peers = [v for k, v in means.items() if k != own]
    if own not in means or not peers:
        return False
    return means[own] >= GROUP_STANDOUT * float(median(np.asarray(peers)))


def _group_means(stats: TraceStats, transfer: npt.NDArray[np.float64], by_stage: bool) -> dict[int, float]:
    """Per group of collectives present (``by_stage``: each stage's DP collectives, keyed by the
    stage; else each replica's embedding collectives, keyed by its DP rank): their mean transfer
    time."""
    if by_stage:
        mask, key = stats.of_types(DP_CODES.tolist()), stats.op_pp
    else:
        mask, key = stats.optype == EMB, stats.op_dp
    keys = key[mask]
    if not keys.size:
        return {}
    sums = np.bincount(keys, weights=transfer[mask])
    counts = np.bincount(keys)
    return {int(k): float(sums[k] / counts[k]) for k in np.flatnonzero(counts)}


def collective_put_back(stats: TraceStats, probe: Probe) -> float:
    """The ``add`` share of the DP and embedding collectives: every one of them put back into the
    ideal run alone (``Probe.mixed_means``), over the gap between the measured and the ideal run."""
    gap = probe.t_orig - probe.t_ideal
    if gap <= 1e-12 * max(probe.t_orig, 1e-12):
        return 0.0
    mask = stats.of_types([*DP_CODES.tolist(), EMB])
    if not mask.any():
        return 0.0
    return float((probe.mixed_means([mask], [False])[0] - probe.t_ideal) / gap)


def comm_mask(stats: TraceStats) -> npt.NDArray[np.bool_]:
    """Per op: whether it is a communication op (P2P or collective) of the vocabulary."""
    return stats.of_types(COMM_CODES.tolist())


# the P2P rows, their link ids and their transfer ratios (``P2PRows``' per-row views)
RowViews = tuple[npt.NDArray[np.int64], npt.NDArray[np.int32], npt.NDArray[np.float64]]


@dataclass(frozen=True)
class P2PRows:
    """The point-to-point rows' sums that :func:`candidates` and :func:`stands_out` both read,
    and their per-row views, made once instead of computed over every op and masked.

    ``worker_excess_sum``, ``worker_ratio_sum`` / ``worker_n``: the excess (transfer time over
    the type baseline, clipped at 0) and the ratio (transfer time over the type baseline floored
    at 1e-12 s) summed, and the rows counted, per flat worker; ``link_excess_sum``,
    ``link_ratio_sum`` / ``link_n``: the same per PP link id (``dp * pp`` slots; rows off the
    links left out). Made over the rows in ascending order (a bincount, as over all ops masked to
    the P2P rows: the same sums to the bit), or read off the engine's dense layout where it holds
    the rows (``p2p_rows``: the same terms, added in another order; the last bits may differ).

    The per-row views, made on first read (``far_ends`` reads them, only for a candidate that
    stands out): ``rows``, the op rows of P2P transfers, ascending; ``link``, their link ids
    (``p2p_links``, -1 off the pipeline's links); ``ratio``, their ratios."""

    worker_excess_sum: npt.NDArray[np.float64]
    worker_ratio_sum: npt.NDArray[np.float64]
    worker_n: npt.NDArray[np.int64]
    link_excess_sum: npt.NDArray[np.float64]
    link_ratio_sum: npt.NDArray[np.float64]
    link_n: npt.NDArray[np.int64]
    per_row: Callable[[], RowViews]
    _made: dict[str, RowViews] = field(default_factory=dict, repr=False, compare=False)

    def _views(self) -> RowViews:
        if "views" not in self._made:
            self._made["views"] = self.per_row()
        return self._made["views"]

    @property
    def rows(self) -> npt.NDArray[np.int64]:
        return self._views()[0]

    @property
    def link(self) -> npt.NDArray[np.int32]:
        return self._views()[1]

    @property
    def ratio(self) -> npt.NDArray[np.float64]:
        return self._views()[2]


def _p2p_row_views(
    stats: TraceStats,
    transfer: npt.NDArray[np.float64],
    base: Baseline,
    links: tuple[npt.NDArray[np.bool_], npt.NDArray[np.int32]],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int32], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """(rows, link, ratio, excess) of the P2P rows of ``links``, gathered (fresh arrays)."""
    is_p2p, link = links
    rows = np.flatnonzero(is_p2p)
    t, b = transfer[rows], base[rows]
    # the same operations on fresh gathers, made in place: no row-sized temporaries beside them
    excess = np.subtract(t, b)
    np.clip(excess, 0.0, None, out=excess)
    ratio = np.divide(t, np.maximum(b, 1e-12, out=b), out=t)
    return rows, link[rows], ratio, excess


def p2p_rows(
    stats: TraceStats,
    transfer: npt.NDArray[np.float64],
    base: Baseline,
    links: tuple[npt.NDArray[np.bool_], npt.NDArray[np.int32]],
) -> P2PRows:
    """The :class:`P2PRows` of ``transfer`` against its type baselines ``base`` (``type_baseline``)
    over the P2P rows and links of ``links`` (``p2p_links``).

    Where ``transfer`` is the probe's and the engine's dense layout holds the rows, with the
    baselines a per-type table (``PerType``), the sums are read off the layout, one (stage, P2P
    type) block of nodes at a time (``WhatIfEngine.type_blocks``): every P2P row of a worker is a
    cell of its stage's P2P nodes, and every row of one node is on the same link (its stage and
    type give the link's lower stage). No row is found or gathered; the per-row views are made
    only if read."""

    def views() -> RowViews:
        rows, on, ratio, _ = _p2p_row_views(stats, transfer, base, links)
        return rows, on, ratio

    dense = _p2p_dense_sums(stats, transfer, base, links, views)
    if dense is not None:
        return dense
    n_workers = stats.dp * stats.pp
    rows, on, ratio, excess = _p2p_row_views(stats, transfer, base, links)
    # the per-worker sums, then the per-link ones: each grouping's ids (in numpy's index type,
    # made once for its bincounts: each bincount of a narrower id would convert it again) made
    # and let go in turn, so that no more of them is alive at once than one needs
    cell = stats.op_worker[rows].astype(np.intp)
    worker_excess_sum = np.bincount(cell, weights=excess, minlength=n_workers)
    worker_ratio_sum = np.bincount(cell, weights=ratio, minlength=n_workers)
    worker_n = np.bincount(cell, minlength=n_workers)
    del cell
    # per link id, shifted by one: the rows off the links (-1) fall into slot 0, dropped; the
    # other slots add the same rows in the same order as a bincount of the on-link rows alone
    slot = on.astype(np.intp)
    slot += 1
    link_excess_sum = np.bincount(slot, weights=excess, minlength=n_workers + 1)[1:]
    del excess
    link_ratio_sum = np.bincount(slot, weights=ratio, minlength=n_workers + 1)[1:]
    link_n = np.bincount(slot, minlength=n_workers + 1)[1:]
    del slot
    made = (rows, on, ratio)
    return P2PRows(
        worker_excess_sum=worker_excess_sum.astype(np.float64, copy=False),
        worker_ratio_sum=worker_ratio_sum.astype(np.float64, copy=False),
        worker_n=worker_n,
        link_excess_sum=link_excess_sum.astype(np.float64, copy=False),
        link_ratio_sum=link_ratio_sum.astype(np.float64, copy=False),
        link_n=link_n,
        per_row=lambda: made,
    )


def _p2p_dense_sums(
    stats: TraceStats,
    transfer: npt.NDArray[np.float64],
    base: Baseline,
    links: tuple[npt.NDArray[np.bool_], npt.NDArray[np.int32]],
    views: Callable[[], RowViews],
) -> P2PRows | None:
    """The :class:`P2PRows` with its sums read off the engine's dense layout (see ``p2p_rows``;
    its per-row views made by ``views``), or None where they cannot be read so: ``transfer`` not
    the probe's, baselines not a per-type table, P2P rows other than the statistics' own
    (``p2p_links``), an engine whose cells are not exactly the rows or whose DP ranks and stages
    are not the statistics'."""
    probe = stats.probe
    if probe is None or transfer is not probe.original or not isinstance(base, PerType):
        return None
    if links[0] is not stats.of_types([FS, FR, BS, BR]):  # (the statistics' own P2P rows only)
        return None
    blocks = probe.engine.type_blocks([FS, FR, BS, BR])
    dp, pp = stats.dp, stats.pp
    if blocks is None or any(block.shape[1] != dp or not 0 <= s < pp for s, _, block in blocks):
        return None
    sums = np.zeros((6, dp * pp))  # worker excess, ratio, count; link excess, ratio, count
    at = np.arange(dp) * pp  # each DP rank's first flat worker (and link) id
    for s, o, block in blocks:
        b = float(base.table[o]) if o < len(base.table) else 0.0
        # per (node, DP rank, step) cell, the per-row expressions of the row path
        excess = np.subtract(block, b)
        np.clip(excess, 0.0, None, out=excess)
        ratio = np.divide(block, max(b, 1e-12))
        per_rank = (excess.sum(axis=(0, 2)), ratio.sum(axis=(0, 2)), block.shape[0] * block.shape[2])
        for k, v in enumerate(per_rank):
            sums[k, at + s] += v
        # the link to the stage below for forward receives and backward sends, else above
        lower = s - (o not in (FS, BR))
        if 0 <= lower < pp - 1:
            for k, v in enumerate(per_rank):
                sums[3 + k, at + lower] += v
    n = sums[[2, 5]].astype(np.int64)
    return P2PRows(sums[0], sums[1], n[0], sums[3], sums[4], n[1], per_row=views)


def candidates(
    stats: TraceStats,
    transfer: npt.NDArray[np.float64],
    limit: int = MAX_PROBED,
    base: Baseline | None = None,
    batch: BatchIds | None = None,
    links: tuple[npt.NDArray[np.bool_], npt.NDArray[np.int32]] | None = None,
    view: P2PRows | None = None,
) -> list[tuple[str, list[tuple[int, int]], npt.NDArray[np.bool_]]]:
    """The ``limit`` candidate groups with the most excess transfer time, as (name, cells, op mask).

    Excess is summed per candidate with bincount; masks are built only for the ones kept, so the
    cost stays linear in the number of ops for any grid size. ``base`` (``type_baseline`` of
    ``transfer``), ``batch`` (``batch_ids`` of the P2P rows), ``links`` (``p2p_links``) and
    ``view`` (``p2p_rows`` of those) may be passed in when the caller has them already.
    """
    groups = candidate_groups(stats, transfer, limit, base, batch, links, view)
    return [(name, cells, mask()) for name, cells, mask in groups]


Group = tuple[str, list[tuple[int, int]], Callable[[], npt.NDArray[np.bool_]]]


def candidate_groups(
    stats: TraceStats,
    transfer: npt.NDArray[np.float64],
    limit: int = MAX_PROBED,
    base: Baseline | None = None,
    batch: BatchIds | None = None,
    links: tuple[npt.NDArray[np.bool_], npt.NDArray[np.int32]] | None = None,
    view: P2PRows | None = None,
) -> list[Group]:
    """:func:`candidates` with each op mask given as how to make it: the names and cells decide
    whether any candidate stands out (``stands_out``) before a mask is needed."""
    o, d, p = stats.optype, stats.op_dp, stats.op_pp
    dp, pp = stats.dp, stats.pp
    is_comm = comm_mask(stats)
    if base is None:
        base = type_baseline(stats, transfer, is_comm)
    is_p2p, link = p2p_links(stats) if links is None else links
    if view is None:
        view = p2p_rows(stats, transfer, base, (is_p2p, link))
    scored: list[tuple[float, str, int]] = []
    # PP links: sends of stage s and receives of stage s+1 forward; the reverse backward.
    per_link = view.link_excess_sum
    scored += [(float(v), "link", int(i)) for i, v in enumerate(per_link) if v > 0]
    is_dp = stats.of_types(DP_CODES.tolist())
    # excess over the baseline per DP collective row (every one a communication row)
    dp_stage_excess = (
        np.bincount(p[is_dp], weights=np.clip(transfer[is_dp] - base[is_dp], 0.0, None), minlength=pp)
        if dp > 1
        else np.zeros(pp)
    )
    if dp > 1:
        scored += [(float(v), "dp", int(i)) for i, v in enumerate(dp_stage_excess) if v > 0]
    # Each DP replica's embedding all-reduce group (its first and last stage tie the embeddings).
    is_emb = o == EMB
    if is_emb.any() and pp > 1:
        emb_excess = np.clip(transfer[is_emb] - base[is_emb], 0.0, None)
        per_replica = np.bincount(d[is_emb], weights=emb_excess, minlength=dp)
        scored += [(float(v), "emb", int(i) * pp) for i, v in enumerate(per_replica) if v > 0]
    # A worker's or a host's NIC: its point-to-point transfers are slow (a collective's transfer is
    # as slow for every member, so only P2P can single a machine out). Candidates need their mean
    # P2P excess per op at least twice the typical worker's.
    p2p_sum = view.worker_excess_sum
    p2p_n = view.worker_n
    # Slowness as a ratio: each P2P transfer over its type's lower quartile (``transfer`` holds the
    # transfer times), averaged per worker. "Elevated" = at least twice the typical transfer.
    p2p_ratio = np.divide(view.worker_ratio_sum, p2p_n, out=np.ones(dp * pp), where=p2p_n > 0)
    elevated = (p2p_n > 0) & (p2p_ratio >= 2.0)
    hosts_flat = stats.host_of.reshape(-1)  # index = d * pp + p
    in_slow_host = np.zeros(dp * pp, dtype=bool)
    n_hosts = len(unique(hosts_flat[hosts_flat >= 0]))
    n_workers = int((hosts_flat >= 0).sum())
    for h in unique(hosts_flat[elevated]) if n_hosts >= 2 else []:
        members = hosts_flat == h
        # A host holding more than half the job's workers holds its typical worker too: its
        # transfers cannot stand out from the job's (a 3x3 job on 8-GPU hosts puts 8 of its 9
        # ranks on host 0), so it is no candidate of its own.
        if members.sum() > 1 and 2 * int(members.sum()) <= n_workers and elevated[members].all():
            scored.append((float(p2p_sum[members].sum()), "host", int(h)))
            in_slow_host |= members
    # A single worker must also stand out from its own stage (its DP peers). Inside a slow-looking
    # host it is a candidate of its own only when its host-mates do not stand out from their stage
    # peers: with batched P2P (interleaved 1F1B) waits leak into transfer times and lift a slow
    # NIC's host-mates above the type's baseline, but not above their own stage peers.
    by_stage = p2p_ratio.reshape(dp, pp)
    stage_median = median(by_stage, axis=0)
    above_peers = (by_stage >= 2.0 * stage_median[None, :]).reshape(-1)
    # ... or it is the common end of two slow links (``slow_links``): a slow NIC slows every link
    # of its worker, a slow link only its own. With DP 2 the stage median above is half made of
    # the worker itself, so no worker could stand twice above it; two slow links say the same.
    through = np.zeros((dp, pp), dtype=np.int64)
    slow = slow_links(stats, view)
    through[:, :] += slow
    through[:, 1:] += slow[:, :-1]
    single_nic = (through >= 2).reshape(-1)
    host_stands_out = np.zeros(dp * pp, dtype=bool)
    for h in unique(hosts_flat[in_slow_host]):
        members = hosts_flat == h
        if above_peers[members].all():
            host_stands_out |= members
    single = elevated & (above_peers | single_nic) & ~host_stands_out
    scored += [(float(p2p_sum[i]), "worker", int(i)) for i in np.flatnonzero(single)]
    dp_slow = dp_stage_excess > 0

    if batch is None:
        batch = batch_ids(stats, is_p2p)

    def with_collectives(mask: npt.NDArray[np.bool_], stages: set[int]) -> npt.NDArray[np.bool_]:
        # Fixing a member's NIC also fixes the collectives it slows down, for every member, and both
        # ends of its point-to-point transfers (the peer's half of each pair is as slow).
        extra = is_dp & np.isin(p, [st for st in stages if dp_slow[st]])
        own = link[mask]
        touched = unique(own[own >= 0])
        return with_batches(mask | extra | _member(link, touched), batch)

    def mask_of(kind: str, i: int, cells: list[tuple[int, int]]) -> npt.NDArray[np.bool_]:
        r, s = divmod(i, pp)
        if kind == "link":
            return with_batches(link == i, batch)
        if kind == "host":
            # (each op's host, made only here: a host candidate is rare)
            return with_collectives(is_comm & (stats.op_host == i), {b for _, b in cells})
        if kind == "dp":
            return is_dp & (p == i)
        if kind == "emb":
            return is_emb & (d == r)
        return with_collectives(is_comm & (d == r) & (p == s), {s})

    out: list[Group] = []
    for _, kind, i in sorted(scored, key=lambda t: -t[0])[:limit]:
        r, s = divmod(i, pp)
        if kind == "link":
            name, cells = f"pp link dp {r}: stage {s} <-> {s + 1}", [(r, s), (r, s + 1)]
        elif kind == "host":
            name = f"all communication of host {i}"
            cells = [(int(a), int(b)) for a, b in zip(*np.nonzero(stats.host_of == i), strict=True)]
        elif kind == "dp":
            name, cells = f"dp group of stage {i}", [(x, i) for x in range(dp)]
        elif kind == "emb":
            name, cells = f"embedding group of dp {r}", [(r, 0), (r, pp - 1)]
        else:
            name, cells = f"all communication of dp {r}/pp {s}", [(r, s)]
        out.append((name, cells, partial(mask_of, kind, i, cells)))
    return out


Candidates = list[tuple[str, list[tuple[int, int]], npt.NDArray[np.bool_]]]
SHARED_CANDIDATES = "slow-communication candidates"


def probe_candidates(stats: TraceStats, make: Callable[[], Candidates] | None = None) -> Candidates:
    """``candidates(stats, stats.probe.original)``, made once per trace statistics and shared
    (``TraceStats.shared``; never change them): the detector ranks them and the remedy looks its
    group's mask up again. ``make``: how to make them when not made yet (the detector passes the
    baselines, links and batch ids it has)."""
    probe = stats.probe
    if probe is None:
        raise ValueError("the candidates' transfer times come from the what-if probe; this has none")
    return stats.shared(SHARED_CANDIDATES, make or (lambda: candidates(stats, probe.original)))


def p2p_links(stats: TraceStats) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.int32]]:
    """(per op: is a P2P transfer, per op: its PP link id ``dp_rank * pp + lower stage`` or -1).
    Sends of stage s and receives of stage s+1 are the forward direction, the reverse backward.
    The ids are int32, as the flat workers they are made from (``TraceStats.op_worker``)."""
    is_p2p = stats.of_types([FS, FR, BS, BR])

    def make() -> npt.NDArray[np.int32]:
        below = ~stats.of_types([FS, BR])  # the link to the stage below (in int32, off shared views)
        link_stage = stats.op_pp - below
        off = ~is_p2p | (link_stage < 0) | (link_stage >= stats.pp - 1)
        # d * pp + link_stage, below the worker's own id (int32), -1 off the links (set in place)
        out: npt.NDArray[np.int32] = stats.op_worker - below
        out[off] = -1
        return out

    # asked by the candidates, the send floors and the batch ids: made once, shared read-only
    return is_p2p, stats.cached("slow-communication p2p links", make)


def stands_out(
    stats: TraceStats,
    transfer: npt.NDArray[np.float64],
    scored: Sequence[tuple[str, list[tuple[int, int]], object]],
    base: Baseline | None = None,
    links: tuple[npt.NDArray[np.bool_], npt.NDArray[np.int32]] | None = None,
    view: P2PRows | None = None,
) -> list[bool]:
    """Per candidate: whether its own transfers stand out of its peers' (see the module doc).

    A link: the mean over its P2P transfers of transfer / type baseline (``type_baseline``) is at
    least ``STANDOUT`` and at least ``STANDOUT`` times the median of the same mean over the other
    DP ranks' links between the same two stages. A worker: the same over its P2P transfers against
    its stage peers (``candidates`` admits only such workers). Either way every end's own compute is
    normal (``compute_normal``). Hosts, DP and embedding groups: False."""
    if view is None:
        if base is None:
            base = type_baseline(stats, transfer, comm_mask(stats))
        view = p2p_rows(stats, transfer, base, p2p_links(stats) if links is None else links)
    n_links = stats.dp * stats.pp
    sums, counts = view.link_ratio_sum, view.link_n
    per_link = np.divide(sums, counts, out=np.zeros(n_links), where=counts > 0).reshape(stats.dp, stats.pp)
    wsum, wn = view.worker_ratio_sum, view.worker_n
    per_worker = np.divide(wsum, wn, out=np.zeros(n_links), where=wn > 0).reshape(stats.dp, stats.pp)

    def above(table: npt.NDArray[np.float64], d: int, s: int) -> bool:
        peers = np.delete(table[:, s], d)
        ref = float(median(peers)) if peers.size else 1.0
        return bool(table[d, s] >= STANDOUT and table[d, s] >= STANDOUT * ref)

    far = None
    out = []
    for name, cells, _ in scored:
        if name.startswith("pp link"):
            d, s = cells[0]
            hit = above(per_link, d, s)
        elif name.startswith("all communication of dp"):
            d, s = cells[0]
            if far is None:
                far = far_ends(stats, view)
            hit = above(per_worker, d, s) and far_end_agrees(far, d, s)
        else:
            hit = False
        out.append(hit and compute_normal(stats, cells))
    return out


def slow_links(stats: TraceStats, view: P2PRows) -> npt.NDArray[np.bool_]:
    """(dp, pp) per PP link (DP rank d, stages s and s+1, at [d, s]): whether its transfers stand
    out as ``stands_out`` asks of a link (mean transfer / type baseline at least ``STANDOUT``, and
    ``STANDOUT`` times the median of the other DP ranks' links between the same stages)."""
    dp, pp = stats.dp, stats.pp
    sums, counts = view.link_ratio_sum, view.link_n
    per_link = np.divide(sums, counts, out=np.zeros(dp * pp), where=counts > 0).reshape(dp, pp)
    out = np.zeros((dp, pp), dtype=bool)
    if pp < 2:
        return out
    # every link's median of the other DP ranks at once (``median_of_others``: the values a
    # median of each column without that rank gives), where a loop made dp x (pp - 1) medians
    own = per_link[:, : pp - 1]
    ref = median_of_others(own.T).T if dp >= 2 else np.ones_like(own)
    out[:, : pp - 1] = (own >= STANDOUT) & (own >= STANDOUT * ref)
    return out


def _links_through_a_slow_nic(
    stats: TraceStats, view: P2PRows, scored: Candidates, near: list[int]
) -> list[int]:
    """``near`` without the candidates that are symptoms of a slow NIC among them.

    A link's transfers are a subset of either end's, so the most specific rule names a link when
    it explains about as much as its end's NIC. But a slow NIC slows *every* link of its worker
    (or host): a worker or host candidate in ``near`` with at least two slow links
    (``slow_links``) through its cells is a NIC, and the links touching its cells, and the other
    workers or hosts whose slow links all touch them (its partners), are its symptoms and yield
    to it. A slow link leaves its ends' other links normal (one slow link each), so it keeps its
    place."""
    if not any(scored[k][0].startswith(("pp link", "all communication of")) for k in near):
        return near
    slow = [(int(d), int(s)) for d, s in zip(*np.nonzero(slow_links(stats, view)), strict=True)]

    def touching(cells: set[tuple[int, int]]) -> list[tuple[int, int]]:
        return [(d, s) for d, s in slow if (d, s) in cells or (d, s + 1) in cells]

    nics = [k for k in near if scored[k][0].startswith("all communication of")]
    sure = [k for k in nics if len(touching(set(scored[k][1]))) >= 2]
    if not sure:
        return near
    nic_cells = {c for k in sure for c in scored[k][1]}

    def symptom(k: int) -> bool:
        name, cells = scored[k][0], scored[k][1]
        if name.startswith("pp link"):
            return any(c in nic_cells for c in cells)
        if k in sure or not name.startswith("all communication of"):
            return False
        own = touching(set(cells))
        return bool(own) and all((d, s) in touching(nic_cells) for d, s in own)

    return [k for k in near if not symptom(k)]


def far_ends(stats: TraceStats, view: P2PRows) -> npt.NDArray[np.float64]:
    """(dp, pp, 2): per worker, the mean transfer ratio (transfer / type baseline) its partners
    record for the transfers they make with it: index 0 the stage below's end of the link to it,
    1 the stage above's (NaN where there is no such link). A P2P row of worker (d, s) on link
    ``d * pp + l`` has its partner at stage ``2 l + 1 - s`` (the link joins l and l + 1).
    Reads the P2P rows' gathered view (:class:`P2PRows`): the rows on a link, in ascending order."""
    dp, pp = stats.dp, stats.pp
    on_link = view.link >= 0
    rows, link = view.rows[on_link], view.link[on_link]
    lower = link % pp  # the link's lower stage
    own = stats.op_pp[rows].astype(np.int64)
    partner = 2 * lower + 1 - own
    # 0: the recording row's worker is the lower end, i.e. below the worker it partners
    side = (own != lower).astype(np.int64)
    key = (stats.op_dp[rows].astype(np.int64) * pp + partner) * 2 + side
    sums = np.bincount(key, weights=view.ratio[on_link], minlength=dp * pp * 2)
    n = np.bincount(key, minlength=dp * pp * 2)
    return np.divide(sums, n, out=np.full(dp * pp * 2, np.nan), where=n > 0).reshape(dp, pp, 2)


def far_end_agrees(far: npt.NDArray[np.float64], d: int, s: int) -> bool:
    """Whether the other ends of worker (d, s)'s transfers record them as slow too: on at least one
    of its links the partner's mean ratio is at least ``FAR_END`` times the median of the same
    over the other DP ranks (the partners of its stage peers on that link). A slow NIC or link
    lengthens a transfer as both of its ends record it; when only the worker's own records are
    long, the time is spent in that process (descheduled on a busy host between posting a transfer
    and seeing it complete), not on the wire. True with one DP rank (no peers to compare with)."""
    if far.shape[0] < 2:
        return True
    for side in (0, 1):
        mine = far[d, s, side]
        peers = np.delete(far[:, s, side], d)
        peers = peers[np.isfinite(peers)]
        if np.isfinite(mine) and peers.size and mine >= FAR_END * float(median(peers)):
            return True
    return False


def compute_normal(stats: TraceStats, cells: list[tuple[int, int]]) -> bool:
    """Whether every cell's own compute is normal: its typical (median over steps) log ratio to
    its stage peers (itself left out) under ``OWN_Z`` standard errors of the job's noise floor
    (the cells left out of it) and under ``MIN_EXCESS``, whichever is larger. A worker hot in its
    own compute is a machine, not a link, and its transfers hold waits for it. True with one DP
    rank (no stage peers to compare with)."""
    if stats.dp < 2:
        return True
    floor = noise_floor(stats.compute, exclude=cells)
    bar = max(OWN_Z * floor.typical_sigma(), float(np.log(1.0 + MIN_EXCESS)))
    for c in cells:
        r = np.log(np.maximum(peer_ratio(stats.compute, c), 1e-12))
        if float(median(r)) >= bar:
            return False
    return True


def transient(
    stats: TraceStats,
    transfer: npt.NDArray[np.float64],
    base: Baseline,
    scored: list[tuple[str, list[tuple[int, int]], npt.NDArray[np.bool_]]],
) -> list[bool]:
    """Per candidate: whether its excess transfer time (transfer over the type's lower quartile,
    ``type_baseline``) sits mostly in one step: more than ``TRANSIENT_SHARE`` of it in the step
    holding the most, with at least ``TRANSIENT_MIN_STEPS`` traced steps (with fewer, one step
    holding most of it says nothing).

    A slow NIC, link or switch port lengthens the group's transfers in every step (the finding is
    reported as persistent); a collective in which one member was descheduled once on a busy host,
    or one burst of cross traffic, lengthens one step's (real recordings: a stage's DP all-reduce
    with 0.22 s of excess in one step of four and under 0.01 s in the others)."""
    if stats.n_steps < TRANSIENT_MIN_STEPS:
        return [False] * len(scored)
    out = []
    for _, _, mask in scored:
        # each candidate's rows found once and its excess made on them alone (the same values and
        # order as the full-length excess masked, without it or two scans of the mask)
        rows = np.flatnonzero(mask)
        excess = np.clip(transfer[rows] - base[rows], 0.0, None)
        per_step = np.bincount(stats.op_step_index[rows], weights=excess, minlength=stats.n_steps)
        total = float(per_step.sum())
        out.append(total > 0 and float(per_step.max()) > TRANSIENT_SHARE * total)
    return out


def floor_normal(
    stats: TraceStats, transfer: npt.NDArray[np.float64], link: npt.NDArray[np.int32],
    batch: BatchIds, scored: Candidates,
) -> list[bool]:
    """Per candidate: whether it is a PP link whose send floor (``send_floors``) in each direction
    is under ``FAR_END`` times the median of its peer links' (the other DP ranks' links between the
    same two stages); False for other candidates and where a direction has no floor or no peer.

    A slow link (or a sender stalled in every send) adds its time to every transfer, its fastest
    lone sends too; a busy host's descheduled processes lengthen some transfers, never the fastest.
    Real recordings: the injected send delays' links have floors 1.7-40x their peers'; a healthy
    2x3 job's link that stood out of its peer link by its mean (0.45 s of excess, 57% of the
    slowdown removed by idealising it) has floors 1.02x and 0.98x its peer's."""
    floors = lone_send_floors(stats, transfer, link, batch)
    out = []
    for name, cells, _ in scored:
        if not name.startswith("pp link") or stats.dp < 2:
            out.append(False)
            continue
        d, s = cells[0]
        normal = True
        for k in range(2):
            col = floors[k, :, s]
            peers = np.delete(col, d)
            peers = peers[np.isfinite(peers)]
            if not np.isfinite(col[d]) or not peers.size:
                normal = False
                break
            normal &= bool(col[d] < FAR_END * float(median(peers)))
        out.append(normal)
    return out


@dataclass(frozen=True)
class FloorCandidate:
    """A link direction whose fastest lone sends stand out of its peer links' (``floor_candidates``).

    ``sender``: the worker that sends in this direction; ``rows``: both ends' records of the
    direction's transfers (the senders' and the receivers' rows on the link); ``mask``: those rows
    with every batched call they are part of (what the remedy idealises); ``floor`` /
    ``peer_floor``: the direction's send floor and the median of its peer links' (seconds);
    ``excess``: the constant the link adds to each transfer, ``floor - peer_floor``."""

    name: str
    cells: list[tuple[int, int]]
    sender: tuple[int, int]
    rows: npt.NDArray[np.bool_]
    mask: npt.NDArray[np.bool_]
    floor: float
    peer_floor: float

    @property
    def excess(self) -> float:
        return self.floor - self.peer_floor


# (send type, its receive type, the sender's stage offset from the link's lower stage, direction)
_DIRECTIONS = ((FS, FR, 0, "forward"), (BS, BR, 1, "backward"))


def alone_in_call(batch: BatchIds) -> npt.NDArray[np.bool_]:
    """Per op: whether it is not part of a batched P2P call with other rows (``batch_ids``: -1, or
    an id no other row shares)."""
    # one count per id, shifted by one so that -1 (no batch) has a slot of its own, set to 1:
    # every row is then one lookup, without gathering the batched rows first
    # (in numpy's index type, made once: the bincount would convert a narrower id, and a lookup
    # through one takes its slower path)
    slot = batch.astype(np.intp)
    slot += 1
    single = np.bincount(slot, minlength=1) == 1
    single[0] = True
    return single[slot]  # (a lookup of booleans: no row-sized array of counts)


def send_floors(
    stats: TraceStats, transfer: npt.NDArray[np.float64], link: npt.NDArray[np.int32],
    alone: npt.NDArray[np.bool_],
) -> npt.NDArray[np.float64]:
    """(2, dp, pp - 1) per direction (0 forward, 1 backward) and PP link (DP rank d, stages s and
    s + 1): the ``SEND_FLOOR_QUANTILE`` order statistic of the transfer times of the link's sends
    in that direction that ride alone in their P2P call (``alone``); NaN without such sends.

    Why the floor of lone sends: a batched call's recorded transfer holds the wait for its other
    direction's peer, and on a busy host any transfer may hold a descheduled process's pause; both
    lengthen some transfers, never all. A slow link (or NIC port, or a sender that stalls inside
    every send) adds its time to every transfer in that direction, its fastest ones too."""
    dp, pp = stats.dp, stats.pp
    out = np.full((2, dp, pp), np.nan)  # indexed by the link id d * pp + s (s < pp - 1 used)
    for k, (code, _, _, _) in enumerate(_DIRECTIONS):
        rows = np.flatnonzero((stats.optype == code) & alone & (link >= 0))
        if not rows.size:
            continue
        # every link's order statistic: by a partition when the links carry equal counts, else
        # from one sort by (link, transfer time) (``worker_order_statistic``: NaN without sends)
        floors = worker_order_statistic(link[rows], transfer[rows], dp * pp, SEND_FLOOR_QUANTILE)
        out[k].reshape(-1)[:] = floors
    return out[:, :, : max(pp - 1, 0)]


def lone_send_floors(
    stats: TraceStats, transfer: npt.NDArray[np.float64], link: npt.NDArray[np.int32],
    batch: BatchIds,
) -> npt.NDArray[np.float64]:
    """``send_floors(stats, transfer, link, alone_in_call(batch))``. Of the shared arrays (the
    probe's transfer times, ``p2p_links`` and ``p2p_batch_ids``, which nobody changes) it is made
    once per trace statistics: the link test (``floor_normal``) and the send-floor candidates ask
    for the same floors. Other arrays are computed each time. Never change the result."""
    probe = stats.probe
    if not (
        probe is not None
        and transfer is probe.original
        and link is p2p_links(stats)[1]
        and batch is p2p_batch_ids(stats)
    ):
        return send_floors(stats, transfer, link, alone_in_call(batch))
    return stats.shared(SHARED_SEND_FLOORS, lambda: send_floors(stats, transfer, link, alone_in_call(batch)))


SHARED_SEND_FLOORS = "slow-communication send floors by lone sends"


def floor_candidates(
    stats: TraceStats, transfer: npt.NDArray[np.float64], link: npt.NDArray[np.int32],
    batch: BatchIds, limit: int = MAX_PROBED,
) -> list[FloorCandidate]:
    """The link directions whose send floor (``send_floors``) is at least ``STANDOUT`` times the
    median of the same over the other DP ranks' links between the same two stages (at least one
    such peer with a floor): the detector's "stands out" convention, read where neither batched
    waits nor sporadic pauses reach. At most ``limit``, the ones whose constant (floor over the
    peers') adds the most time over their transfers first."""
    floors = lone_send_floors(stats, transfer, link, batch)
    found: list[tuple[float, int, int, int, float]] = []  # (added time, direction, d, s, peer floor)
    for k, (code, _, _, _) in enumerate(_DIRECTIONS):
        sends = np.bincount(link[(stats.optype == code) & (link >= 0)], minlength=stats.dp * stats.pp)
        for s in range(floors.shape[2]):
            col = floors[k, :, s]
            ok = np.flatnonzero(np.isfinite(col))
            if ok.size < 2:
                continue  # no peer link with a floor
            ref = median_of_others(col[ok][None, :])[0]
            for d, f, r in zip(ok.tolist(), col[ok].tolist(), ref.tolist(), strict=True):
                if f >= STANDOUT * r:
                    found.append(((f - r) * float(sends[d * stats.pp + s]), k, d, s, r))
    out: list[FloorCandidate] = []
    for _, k, d, s, ref in sorted(found, key=lambda x: -x[0])[:limit]:
        code, partner, off, direction = _DIRECTIONS[k]
        sender, receiver = (d, s + off), (d, s + 1 - off)
        rows = (link == d * stats.pp + s) & (
            ((stats.optype == code) & (stats.op_pp == sender[1]))
            | ((stats.optype == partner) & (stats.op_pp == receiver[1]))
        )
        out.append(FloorCandidate(
            name=f"pp link dp {d}: stage {s} <-> {s + 1}, {direction} sends",
            cells=[(d, s), (d, s + 1)],
            sender=sender,
            rows=rows,
            mask=with_batches(rows, batch),
            floor=float(floors[k, d, s]),
            peer_floor=float(ref),
        ))
    return out


def receiver_waits(
    stats: TraceStats, transfer: npt.NDArray[np.float64], link: npt.NDArray[np.int32],
    batch: BatchIds, cand: FloorCandidate,
) -> bool:
    """Whether the receiving end of a send-floor candidate's direction waits for its transfers too:
    the ``SEND_FLOOR_QUANTILE`` order statistic of the link's lone receives of that direction (the
    receiver's records, ``alone_in_call``) is at least ``STANDOUT`` times the median of the same
    over its peer links (the other DP ranks' links between the same two stages), the bar its send
    floor passed. True where no such receive or no peer's is recorded (nothing to judge by).

    Why: a slow link, NIC port or a sender stalling in each send delays the data, so the receiver,
    posted first, waits the added time in its own receive as well; a sender whose sends are long
    because its receiver posts late (a rendezvous transfer waits for the last to arrive) finds the
    data taken at once on the other end, and the receiver's records stay at its peers'. Real
    recordings: every injected send delay found by its send floor has a receive floor 6.8x its
    peer links' or more (the lowest ``heldout12`` ``send-delay-3x2`` 6.83 and ``heldout6``
    ``send-delay-3x2`` 6.87); the two send floors found on jobs with no send delay (``heldout13``
    ``healthy-2x2``'s backward sends, 8.4x its peer link's, and ``heldout12`` ``gc-pause-4x2``'s
    forward sends, 28x) have receive floors 1.07x and 1.05x."""
    partner = _DIRECTIONS[0 if cand.name.endswith("forward sends") else 1][1]
    d, s = cand.cells[0]
    rows = np.flatnonzero((stats.optype == partner) & alone_in_call(batch) & (link >= 0))
    if not rows.size or stats.dp < 2:
        return True
    floors = worker_order_statistic(link[rows], transfer[rows], stats.dp * stats.pp, SEND_FLOOR_QUANTILE)
    col = floors.reshape(stats.dp, stats.pp)[:, s]
    peers = np.delete(col, d)
    peers = peers[np.isfinite(peers)]
    if not np.isfinite(col[d]) or not peers.size:
        return True
    return bool(col[d] >= STANDOUT * float(median(peers)))


SHARED_FLOORS = "slow-communication send floors"


def probe_floor_candidates(stats: TraceStats) -> list[FloorCandidate]:
    """``floor_candidates`` over the probe's transfer times, made once per trace statistics and
    shared (the detector tests them, the remedy looks its group's mask up again)."""
    probe = stats.probe
    if probe is None:
        raise ValueError("the candidates' transfer times come from the what-if probe; this has none")

    def make() -> list[FloorCandidate]:
        link = p2p_links(stats)[1]
        return floor_candidates(stats, probe.original, link, p2p_batch_ids(stats))

    return stats.shared(SHARED_FLOORS, make)


def floor_shares(probe: Probe, cands: list[FloorCandidate]) -> list[tuple[float, float]]:
    """Per candidate, (share of the slowdown, slowdown alone) of its constant: the larger of the
    ``rem`` view (every transfer of the direction, both ends' records, shortened by ``excess``,
    never under its ideal) and the ``add`` view (only ``excess`` added to each of them in the ideal
    run); the slowdown alone is the ``add`` run's mean step time over the ideal one's.

    The hypothesis tested is the link's own: a constant extra time per transfer. Idealising or
    putting back the direction's recorded transfers instead would move the batched waits and the
    pauses they hold too, which are no part of the link."""
    gap = probe.t_orig - probe.t_ideal
    if not cands or gap <= 1e-12 * max(probe.t_orig, 1e-12):
        return [(0.0, 1.0) for _ in cands]
    runs = []
    for c in cands:
        add = probe.ideal.copy()
        add[c.rows] += c.excess
        rem = probe.original.copy()
        rem[c.rows] = np.maximum(rem[c.rows] - c.excess, probe.ideal[c.rows])
        runs += [add, rem]
    t = probe.mean_times(np.stack(runs))
    out = []
    for i in range(len(cands)):
        t_add, t_rem = float(t[2 * i]), float(t[2 * i + 1])
        share = max((t_add - probe.t_ideal) / gap, (probe.t_orig - t_rem) / gap)
        out.append((float(share), t_add / max(probe.t_ideal, 1e-12)))
    return out


def both_views(probe: Probe, masks: list[npt.NDArray[np.bool_]], batched: bool = False) -> list[float]:
    """Per op mask, the larger of the ``rem`` share (idealise only those ops) and the ``add`` share
    (put only those ops back into the ideal run), as the compute detectors take it: with a second
    cause on the critical path, removing one alone under-states it. With ``batched`` P2P calls
    (interleaved schedules) a transfer's recorded time also holds the wait for the peer's compute,
    so putting transfers back would re-add compute waits: ``rem`` only."""
    if not masks:
        return []
    if batched:
        return probe.fix_ratios(masks)
    gap = probe.t_orig - probe.t_ideal
    if gap <= 1e-12 * max(probe.t_orig, 1e-12):
        return [0.0 for _ in masks]
    # both views of every mask in one batch of runs
    t = probe.mixed_means([*masks, *masks], [True] * len(masks) + [False] * len(masks))
    rem = [float((probe.t_orig - x) / gap) for x in t[: len(masks)]]
    return [max(r, float((x - probe.t_ideal) / gap)) for r, x in zip(rem, t[len(masks) :], strict=True)]


def batch_ids(stats: TraceStats, is_p2p: npt.NDArray[np.bool_]) -> BatchIds:
    """Per op: an id shared by the P2P rows of one batched call (same worker, step and start time;
    a batched send/recv is recorded as directional rows with identical timing), -1 elsewhere.

    Only which rows share an id means anything (its readers test membership and count rows per
    id). The ids number the runs of equal (cell, start) in ``np.lexsort((start, cell))`` order of
    the P2P rows; when the rows are stored in (step, worker) blocks, each in time order
    (``_in_cell_blocks``), a call's rows are one such run in the stored order already (the
    blocks' order splits no run and joins none, their cells differing), so the runs are numbered
    as they are stored, without the sort and its gathers: the same calls, other numbers. When
    every row, not only the P2P ones, is stored so, the rows of equal (cell, start) are one run
    of all the rows (any row between two of them shares their cell and start), so the runs of
    all the rows are numbered and the other rows' ids set to -1: the same calls again, without
    finding or gathering the P2P rows (ids below the row count, with gaps)."""
    # ids below the row count: int32 where it fits one
    kind: type[np.signedinteger[Any]] = np.int32 if stats.n_ops <= np.iinfo(np.int32).max else np.int64
    if stats.op_start is not None and is_p2p.any() and _in_cell_blocks(stats.op_cell, stats.op_start):
        every = _runs_numbered(stats.op_cell, stats.op_start, kind)
        np.copyto(every, -1, where=~is_p2p)
        return every
    out: BatchIds = np.full(stats.n_ops, -1, dtype=kind)
    if stats.op_start is None or not is_p2p.any():
        return out
    idx = np.flatnonzero(is_p2p)
    cell = stats.op_cell[idx]
    start = stats.op_start[idx]
    if not _in_cell_blocks(cell, start):
        order = np.lexsort((start, cell))
        idx, cell, start = idx[order], cell[order], start[order]
    out[idx] = _runs_numbered(cell, start, kind)
    return out


def _runs_numbered(
    cell: npt.NDArray[np.integer[Any]], start: npt.NDArray[np.float64], kind: type[np.signedinteger[Any]]
) -> BatchIds:
    """Per row: the number of its run of equal (cell, start) neighbours, from 0, in one array of
    the ids' width ``kind`` (a new run where the cell or the start changes)."""
    new_group = np.empty(len(cell), dtype=bool)
    new_group[0] = True
    np.not_equal(cell[1:], cell[:-1], out=new_group[1:])
    new_group[1:] |= start[1:] != start[:-1]
    ids: BatchIds = np.cumsum(new_group, dtype=kind)
    ids -= 1
    return ids


SHARED_BATCHES = "slow-communication P2P batch ids"


def p2p_batch_ids(stats: TraceStats) -> BatchIds:
    """``batch_ids`` of the trace's P2P rows (``p2p_links``), made once per trace statistics and
    shared by the detector and the send-floor candidates (never change it)."""
    return stats.shared(SHARED_BATCHES, lambda: batch_ids(stats, p2p_links(stats)[0]))


def _in_cell_blocks(cell: npt.NDArray[np.integer[Any]], start: npt.NDArray[np.float64]) -> bool:
    """Whether the rows come in blocks of one cell each (every cell in one run of rows), each
    block's start times ascending (ties allowed): how traces store their (step, worker) blocks,
    each worker's ops in time order."""
    if len(cell) < 2:
        return True
    same = cell[1:] == cell[:-1]
    # every cell in one run: as many runs as cells, i.e. the runs' cells all differ (counted over
    # the runs' first rows, a few thousand, not over every row)
    firsts = cell[np.r_[0, np.flatnonzero(~same) + 1]]
    if len(unique(firsts)) != len(firsts):
        return False
    # (compared over every neighbour pair and masked as booleans: no copy of the start times)
    return bool(np.all((start[1:] >= start[:-1]) | ~same))


def with_batches(mask: npt.NDArray[np.bool_], batch: BatchIds) -> npt.NDArray[np.bool_]:
    """``mask`` plus every row of a batched P2P call one of its rows is in: a batched call completes
    when all its transfers have, so fixing one direction alone leaves the call as slow."""
    hit = unique(batch[mask & (batch >= 0)])
    return mask | _member(batch, hit) if hit.size else mask


def _member(ids: BatchIds, wanted: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
    """``(ids >= 0) & np.isin(ids, wanted)`` for non-negative ``wanted``, by a lookup table over
    the id range (``np.isin`` sorts or hashes every row). The table has one slot more than the
    ids need, never set: the id -1 (no link, no batch) reads it as numpy's last element, so the
    usual ids (-1 and up) take one gather and no clipped copy of every row."""
    table = np.zeros(int(max(ids.max(initial=0), wanted.max(initial=0))) + 2, dtype=bool)
    table[wanted] = True
    if ids.size and int(ids.min()) < -1:
        return (ids >= 0) & table[np.maximum(ids, 0)]
    return table[ids]


class PerType:
    """Per op: its op type's value, ``table[optype]``, looked up only at the rows read
    (``base[rows]``, ``base[mask]``: the same values as indexing the full-length array) instead of
    made for every op: the detector reads its type baselines at communication rows only, and a
    full-length copy (15 MB at 1.9M ops) stood under its peak of live memory."""

    def __init__(self, table: npt.NDArray[np.float64], optype: npt.NDArray[np.integer[Any]]) -> None:
        self.table = table
        self.optype = optype

    def __getitem__(self, index: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
        out: npt.NDArray[np.float64] = self.table[self.optype[index]]
        return out


# per op: the type baselines (``type_baseline``), as an array or looked up where read (``PerType``)
Baseline = npt.NDArray[np.float64] | PerType


def type_baseline(
    stats: TraceStats, transfer: npt.NDArray[np.float64], is_comm: npt.NDArray[np.bool_]
) -> npt.NDArray[np.float64]:
    """Per communication op: the lower quartile of its op type's transfer times (0 elsewhere),
    ``type_baseline_table`` looked up for every op."""
    table = type_baseline_table(stats, transfer, is_comm)
    return table[stats.optype] if len(transfer) else np.zeros_like(transfer)


def type_baseline_table(
    stats: TraceStats, transfer: npt.NDArray[np.float64], is_comm: npt.NDArray[np.bool_]
) -> npt.NDArray[np.float64]:
    """Per op-type code: the lower quartile of the type's transfer times over the communication
    rows (0 for other types); ``type_baseline`` looks it up per op.

    Localisation needs a clean baseline: when a slow host or link carries half the transfers of a
    type, the method's median ideal is itself slow; the lower quartile is not. A quartile does not
    depend on the order of the values: of the probe's transfer times and the communication rows,
    each type's values are read from the engine's dense layout where its cells are the rows
    (``Probe.type_values``), without finding and sorting the rows."""
    top = int(stats.optype.max(initial=-1)) + 1
    probe = stats.probe
    dense = None
    if probe is not None and transfer is probe.original and is_comm is comm_mask(stats):
        dense = probe.type_values(COMM_CODES.tolist())
    if dense is not None:
        table = np.zeros(top, dtype=transfer.dtype)
        for kind, values in dense.items():
            table[kind] = percentile(values, 25)
        return table
    # Every row of a communication type is a communication row: search only those.
    rows = np.flatnonzero(is_comm)
    codes = stats.optype[rows]
    # each type's transfer times in ascending row order, as transfer[optype == code] lists them,
    # from one stable (radix) sort of the codes instead of a scan of every communication row per type
    order = np.argsort(codes, kind="stable")
    counts = np.bincount(codes)
    starts = np.cumsum(counts) - counts
    by_type = transfer[rows[order]]
    # one quartile per type, then one lookup per op (a scatter per type wrote every row again)
    table = np.zeros(max(len(counts), top), dtype=transfer.dtype)
    for code in np.flatnonzero(counts):
        table[code] = percentile(by_type[starts[code] : starts[code] + counts[code]], 25)
    # (op-type codes index the vocabulary, 0 and up: readers code op names through it)
    return table


def batched_calls(stats: TraceStats) -> bool:
    """Whether any P2P call of the trace is batched (``p2p_batch_ids``: an id on two rows or
    more), made once per trace statistics."""

    def make() -> bool:
        batch = p2p_batch_ids(stats)
        ids = batch[batch >= 0]
        return bool(ids.size) and bool((np.bincount(ids) > 1).any())

    return stats.shared("slow-communication batched calls", make)


@register_plan
def planned_runs(report: Report, stats: TraceStats) -> tuple[list[npt.NDArray[np.bool_]], list[bool]]:
    """The masked scenarios :func:`detect` asks for whatever it finds, as ``(masks, ideal_inside)``:
    all communication idealised, and put back alone too without batched P2P calls
    (``both_views``); none where it judges nothing."""
    if report.slowdown < DECOMPOSE_THRESHOLD or stats.probe is None:
        return [], []
    is_comm = comm_mask(stats)
    if batched_calls(stats):
        return [is_comm], [True]
    return [is_comm, is_comm], [True, False]


@register(CauseId.SLOW_COMMUNICATION)
def detect(report: Report, stats: TraceStats) -> CauseMatch | None:
    """Match communication-dominated slowdown and localise it to a link or group when possible."""
    if report.slowdown < DECOMPOSE_THRESHOLD or stats.probe is None:
        return None
    probe = stats.probe
    is_comm = comm_mask(stats)
    # the P2P links, lower-quartile baselines and batch ids, computed once for candidates and
    # stands_out
    links = p2p_links(stats)
    batch = p2p_batch_ids(stats)
    batched = batched_calls(stats)
    # the send-floor candidates (shared, read below) made first: their temporaries then stand on
    # top of less live memory than the P2P rows' views below, where the detector's peak was
    floor_candidates_made = probe_floor_candidates(stats)
    base = PerType(type_baseline_table(stats, probe.original, is_comm), stats.optype)
    view = p2p_rows(stats, probe.original, base, links)
    # the candidates' names and cells first: their masks are made once the share test below
    # leaves the candidates something to decide
    ranked = candidate_groups(stats, probe.original, base=base, batch=batch, links=links, view=view)
    standout = [False] * len(ranked)
    if batched and ranked:
        # A candidate whose own transfers stand out carries its put-back cost too (module doc).
        standout = stands_out(stats, probe.original, ranked, base=base, links=links, view=view)
    picked_groups = [g for g, hit in zip(ranked, standout, strict=True) if hit]
    # A link direction whose fastest lone sends stand out of its peer links' (``floor_candidates``)
    # is tested on the constant it adds to every transfer: its own share of the slowdown
    # (``MIN_SHARE``, as every candidate) with a slowdown alone that the method would decompose
    # (``DECOMPOSE_THRESHOLD``: with a small gap a few milliseconds are a large share), or a clear
    # slowdown alone (``CLEAR_ALONE``). Slow in every transfer, it is persistent by construction.
    # Its sender's compute must be normal: a process slow in everything (descheduled on a busy
    # host, or a slow machine) lengthens its own records of its sends too. The receiver's need not:
    # a late receiver is the last to arrive, and a transfer's time counts from the last arrival.
    # But the receiver must wait in its own receives too (``receiver_waits``): sends long only on
    # the sender's side are the sender waiting for a late receiver, not the link.
    floors = [
        c for c in floor_candidates_made
        if compute_normal(stats, [c.sender]) and receiver_waits(stats, probe.original, links[1], batch, c)
    ]
    floor_found = [
        (c, v)
        for c, (v, alone) in zip(floors, floor_shares(probe, floors), strict=True)
        if (v >= MIN_SHARE and alone >= DECOMPOSE_THRESHOLD) or alone >= CLEAR_ALONE
    ]
    # Only a candidate that stands out (``picked``, ``floor_found``) may carry the finding when all
    # communication explains under ``MIN_SHARE`` (the first test after the shares, below): with
    # none, that share alone decides, from its own run, before the candidates' runs are made.
    # With batched P2P calls only ``rem`` counts for communication as a whole; a collective's
    # transfer time holds no wait (it counts from its last member's arrival), so the DP and
    # embedding collectives' put-back is their own cost (``collective_put_back``) and may carry a
    # candidate group of them past the gate.
    collective = (
        [group_stands_out(stats, probe.original, name, cells) for name, cells, _ in ranked]
        if batched
        else [False] * len(ranked)
    )
    if (
        not picked_groups
        and not floor_found
        and both_views(probe, [is_comm], batched)[0] < MIN_SHARE
        and not (any(collective) and real_share(collective_put_back(stats, probe), probe))
    ):
        return None
    scored = probe_candidates(stats, lambda: [(name, cells, mask()) for name, cells, mask in ranked])
    picked = [m for (_, _, m), hit in zip(scored, standout, strict=True) if hit]
    # All communication, all compute, every candidate and the put-back view of each candidate
    # that stands out in one batch of what-if runs (each scenario's step times do not depend on
    # the batch it is simulated in; the probe keeps them for the views asked for below).
    masks = [is_comm, ~is_comm, *(m for _, _, m in scored)]
    if picked:
        probe.mixed_means([*masks, *picked], [True] * len(masks) + [False] * len(picked))
    share_comm, share_compute, *shares = both_views(probe, masks, batched)
    if picked:
        both = iter(both_views(probe, picked, False))
        shares = [max(v, next(both)) if hit else v for v, hit in zip(shares, standout, strict=True)]
    if any(collective):
        # a group of collectives carries its put-back cost too: no wait is in its transfer times
        coll_masks = [m for (_, _, m), c in zip(scored, collective, strict=True) if c]
        own = iter(both_views(probe, coll_masks, False))
        shares = [max(v, next(own)) if c else v for v, c in zip(shares, collective, strict=True)]
    # (waits excluded from its view) a standing-out candidate, or with batched calls a group of
    # collectives standing out of its peer groups, may carry the finding when communication as a
    # whole explains under MIN_SHARE (without batched calls that share already holds both views)
    own_view = [hit or c for hit, c in zip(standout, collective, strict=True)]
    # A candidate whose excess transfer time sits mostly in one step is a transient stall (one
    # member descheduled, or one burst on the wire), not a slow link or group: it carries nothing.
    stalls = transient(stats, probe.original, base, scored)
    shares = [0.0 if t else v for v, t in zip(shares, stalls, strict=True)]
    # A PP link whose fastest lone sends, both ways, are as fast as its peer links' holds waits and
    # pauses in its long transfers, not a slow wire (``floor_normal``): it carries nothing, and a
    # job-wide finding that is mostly its time is not one either.
    waits = floor_normal(stats, probe.original, links[1], batch, scored)
    held_by_waits = max((v for v, w in zip(shares, waits, strict=True) if w), default=0.0)
    shares = [0.0 if w else v for v, w in zip(shares, waits, strict=True)]
    floor_of = {c.name: c for c, _ in floor_found}
    # a candidate that may carry the finding: a real share of its own (``real_share``: MIN_SHARE,
    # or beside a larger cause SECONDARY_EFFECT of the ideal step, the compute detectors' test), or
    # its send floor's test passed
    # A group of collectives at its peer groups' pace is no place, whatever its share: under heavy
    # per-op noise idealising any one stage's DP group removes a share of the noise's cost (set 7
    # healthy-noisy-0 and -5: S = 1.065 and 1.086, a DP group no slower than its peers 29-47% of it,
    # named slow communication on healthy jobs); the seen slow DP groups stand 2x their peers.
    qualified = [
        real_share(v, probe)
        and (not name.startswith(COLLECTIVE_GROUPS) or group_stands_out(stats, probe.original, name, cells))
        for v, (name, cells, _) in zip(shares, scored, strict=True)
    ] + [True for _ in floor_found]
    if floor_found:
        scored = [*scored, *((c.name, c.cells, c.mask) for c, _ in floor_found)]
        shares = [*shares, *(v for _, v in floor_found)]
        standout = [*standout, *(True for _ in floor_found)]
        own_view = [*own_view, *(True for _ in floor_found)]
    if share_comm < MIN_SHARE and not any(
        q for q, hit in zip(qualified, own_view, strict=True) if hit
    ):
        return None
    # Communication need not beat all compute: in a multi-cause job (or under compute noise) a link
    # or group that explains its own real share is a cause too. Unlocalised slowness must.
    if share_comm <= share_compute and not any(qualified):
        return None
    def place(pool: list[int]) -> int:
        # the best of ``pool`` (-1 with none), then, among candidates nearly as good, the most
        # specific one: the smallest fix (fewest ops idealised; a link's transfers are a subset of
        # either end's NIC), then the fewest workers
        if not pool or not shares:
            return -1
        best = max(pool, key=lambda k: shares[k])
        near = [k for k, v in enumerate(shares) if v >= 0.9 * shares[best]]
        # A collective runs at its slowest member's pace: when a worker or host whose own P2P
        # transfers are slow is nearly as good, its stage's DP group is slow because of it.
        groups = ("dp group", "pp link", "embedding group")
        members = {c for k in near if not scored[k][0].startswith(groups) for c in scored[k][1]}
        near = [
            k
            for k in near
            if not (scored[k][0].startswith("dp group") and any(c in members for c in scored[k][1]))
        ]
        near = _links_through_a_slow_nic(stats, view, scored, near)
        return min(near, key=lambda k: (int(scored[k][2].sum()), len(scored[k][1]), -shares[k]))

    def holds(k: int) -> bool:
        return k >= 0 and shares[k] >= 0.5 * share_comm and qualified[k]

    # The best qualified candidate (with none, the best: it names the job-wide finding's reach).
    # Those holding MIN_SHARE or passing their send floor's test are placed first: a candidate
    # qualified only as a secondary cause (``real_share``) is placed when they place nothing, so a
    # worker whose transfers include a slow link's does not take the link's place for holding a
    # little more time beside it (heldout7 send-delay-3x2).
    first_floor = len(qualified) - len(floor_found)  # (the send floors' candidates come last)
    holding = [k for k, q in enumerate(qualified) if q and (shares[k] >= MIN_SHARE or k >= first_floor)]
    best = place(holding)
    if not holds(best):
        best = place([k for k, q in enumerate(qualified) if q] or list(range(len(shares))))
    localised = holds(best)
    if localised:
        name, cells, _ = scored[best]
        share = shares[best]
        if name.startswith("dp group"):
            spatial = Spatial.ONE_STAGE
        elif name.startswith("all communication of host"):
            spatial = Spatial.ONE_HOST
        else:
            spatial = Spatial.SINGLE_WORKER
        loc = stats.location(cells)
        where = name
    else:
        # Unlocalised transfer slowness is what noisy shared networks look like too; call it a cause
        # only when the job is straggling (S >= 1.1).
        if not report.straggling or share_comm <= share_compute:
            return None
        # ... and only when it is slow throughout: job-wide excess transfer time that sits mostly
        # in one step is a transient stall of the whole job (one burst of a busy host's contention,
        # every collective waiting on a descheduled member), as for a candidate above (real
        # recordings: a healthy 4x2 job with 62% of its excess transfer time in one step of four).
        if transient(stats, probe.original, base, [("all communication", [], is_comm)])[0]:
            return None
        if held_by_waits >= 0.5 * share_comm:
            return None  # most of it one link's waits (``floor_normal``), as for the link itself
        share = share_comm
        spatial = Spatial.JOB_WIDE
        loc = stats.location([(r, s) for r in range(stats.dp) for s in range(stats.pp)])
        where = "job-wide (no single link or group explains it)"
    compute_names = {n for n in OPTYPES if n not in COMM_OPTYPES}
    by_type = {k: v for k, v in report.attribution.by_optype.items() if k not in compute_names}
    top_comm = max(by_type, key=lambda k: by_type[k]) if by_type else None
    fit = 0.75 + (0.15 if localised else 0.0) + 0.1 * min(1.0, (share_comm - share_compute))
    # The lead says what carried the finding: communication holding more than compute, or one
    # place's transfers beside heavier compute (standing out against its peers, or explaining a
    # real share of their own).
    stood_out = bool(localised and standout[best])
    by_floor = floor_of.get(scored[best][0]) if localised else None
    beside = (
        f"Beside compute that holds more of the slowdown (idealising every compute op removes "
        f"{share_compute * 100:.0f}% of it, every transfer {share_comm * 100:.0f}%), one place's "
    )
    if share_comm > share_compute:
        lead = (
            f"Communication, not compute, holds the slowdown: idealising every transfer removes "
            f"{share_comm * 100:.0f}% of it, idealising every compute op only {share_compute * 100:.0f}%. "
        )
    elif stood_out:
        lead = beside + "communication is slow on its own. "
    else:
        lead = beside + "communication explains a share of its own. "
    summary = (
        lead
        + f"Transfer times (after the last peer arrived, so waiting is excluded) are long at {where}; "
        f"fixing that alone removes {share * 100:.0f}%"
        + (
            f". Top communication type by put-back: {top_comm} ({by_type[top_comm]:.3f})."
            if top_comm
            else "."
        )
        + (
            ""
            if by_floor is None
            else f" Its fastest lone sends take {by_floor.floor * 1e3:.1f} ms, "
            f"{by_floor.floor / max(by_floor.peer_floor, 1e-12):.1f}x its peer links' "
            f"({by_floor.peer_floor * 1e3:.1f} ms): time added to every transfer, which waits and "
            "pauses are not."
        )
        + " Check the NICs, links and switch ports of these ranks, or the group's traffic."
    )
    return CauseMatch(
        id=CauseId.SLOW_COMMUNICATION,
        confidence=confidence(share, fit),
        location=loc,
        pattern=Pattern(spatial=spatial, temporal=Temporal.PERSISTENT, resource=Resource.COMMUNICATION),
        evidence={
            "fix_share_all_comm": rounded(share_comm),
            "fix_share_all_compute": rounded(share_compute),
            "group": where,
            "fix_share_group": rounded(share),
            "top_comm_optype": top_comm,
            "stands_out": stood_out,
            "send_floor_s": rounded(by_floor.floor, 6) if by_floor is not None else None,
            "peer_send_floor_s": rounded(by_floor.peer_floor, 6) if by_floor is not None else None,
        },
        summary=summary,
        categories=categories_for(CauseId.SLOW_COMMUNICATION),
    )
