"""The trace statistics' shortcuts against the plain computations they replace: the traced rank of
each worker from the last row of each worker run, the per-stage correlations from one stable sort,
and the shared per-op views (masks, workers, cells, hosts) against their direct formulas."""

from __future__ import annotations

import numpy as np
import pytest

from diagnosers import whatif
from diagnosers.detectors import compute_stats
from diagnosers.detectors.stats import _rank_of, _stage_correlations, _stage_mean, _step_index
from diagnosers.model import OPTYPES
from diagnosers.synth import ScenarioSpec, generate
from diagnosers.synth.spec import Schedule


@pytest.mark.parametrize("blocks", [True, False])
def test_rank_of_is_the_last_write_of_every_row(blocks: bool) -> None:
    rng = np.random.default_rng(3)
    dp, pp = 5, 3
    n = 4000
    d = np.sort(rng.integers(0, dp, n)) if blocks else rng.integers(0, dp, n)
    p = rng.integers(0, pp, n)
    if blocks:  # worker runs, as (step, worker) blocks store them, with some workers absent
        d, p = np.repeat(rng.integers(0, dp, 40), 100), np.repeat(rng.integers(0, pp, 40), 100)
    rank = rng.integers(0, 50, n).astype(np.int64)  # conflicting ranks: the last one must win
    want = np.full((dp, pp), -1, dtype=np.int64)
    for i in range(n):
        want[d[i], p[i]] = rank[i]
    worker = (d * pp + p).astype(np.int32)
    assert np.array_equal(_rank_of(worker, rank, dp, pp), want)
    assert np.array_equal(_rank_of(worker[:0], rank[:0], dp, pp), np.full((dp, pp), -1))


@pytest.mark.parametrize("low", [-1, 0])
def test_stage_correlations_match_one_mask_per_stage(low: int) -> None:
    rng = np.random.default_rng(7)
    pp, n = 6, 3000
    # out-of-range stages are ignored; with every id in 0..65535 the stages sort as 16-bit ids
    stage = rng.integers(low, pp + 1, n).astype(np.int64)
    stage[stage == 4] = 2  # stage 4 empty
    keep = rng.random(n) < 0.8
    keep[stage == 5] = False
    keep[np.flatnonzero(stage == 5)[:2]] = True  # stage 5: two kept rows, too few
    a, b = rng.random(n), rng.random(n)
    c, e = rng.random(n), np.where(stage == 1, 1.0, rng.random(n))  # stage 1 constant on one side
    want: tuple[dict[int, float], dict[int, float]] = ({}, {})
    for s in range(pp):
        m = (stage == s) & keep
        for (x, y), found in zip(((a, b), (c, e)), want, strict=True):
            if m.sum() >= 3 and x[m].std() > 0 and y[m].std() > 0:
                found[s] = float(np.corrcoef(x[m], y[m])[0, 1])
    got = _stage_correlations(stage, keep, pp, (a, b), (c, e))
    assert got == want and 1 not in got[1] and 4 not in got[0] and 5 not in got[0]


@pytest.mark.parametrize("interleaved", [False, True])
def test_shared_views_match_their_formulas(interleaved: bool) -> None:
    spec = (
        ScenarioSpec(dp=4, pp=4, vpp=2, microbatches=8, steps=3, seed=2, schedule=Schedule.INTERLEAVED)
        if interleaved
        else ScenarioSpec(dp=4, pp=2, microbatches=4, steps=3, seed=2, gpus_per_host=2)
    )
    trace = generate(spec).trace
    trace.ops = trace.ops.take(np.random.default_rng(1).permutation(len(trace.ops)))
    stats = compute_stats(trace, whatif.build_engine(trace))
    d, p = stats.op_dp.astype(np.int64), stats.op_pp.astype(np.int64)
    assert np.array_equal(stats.op_worker, d * stats.pp + p)
    assert np.array_equal(stats.op_cell, (stats.op_step_index * stats.dp + d) * stats.pp + p)
    assert np.array_equal(stats.op_host, stats.host_of[d, p])
    codes = [3, 1, 3]
    mask = stats.of_types(codes)
    assert np.array_equal(mask, np.isin(stats.optype, codes))
    assert stats.of_types([1, 3]) is mask and not mask.flags.writeable  # made once, shared
    rank_of = np.full((stats.dp, stats.pp), -1, dtype=np.int64)
    rank_of[trace.ops.dp_rank, trace.ops.stage] = trace.ops.rank
    assert np.array_equal(stats.rank_of, rank_of)


@pytest.mark.parametrize("ids", [[3, 4, 5, 6], [3, 5, 9], [7], [2, 10**9], [0, 1, 2, 3], [0, 2, 5]])
def test_step_index_is_unique_and_searchsorted(ids: list[int]) -> None:
    step = np.random.default_rng(2).choice(np.asarray(ids, dtype=np.int64), 500)
    step[: len(ids)] = ids  # every id present
    steps, si = _step_index(step)
    want = np.unique(step)
    assert np.array_equal(steps, want) and steps.dtype == np.int64
    assert np.array_equal(si, np.searchsorted(want, step)) and si.dtype == np.int64
    if ids == list(range(len(ids))):  # ids from 0 without a gap: the column itself, read-only
        assert np.shares_memory(si, step) and not si.flags.writeable and step.flags.writeable


def test_stage_mean_over_rows_is_the_masked_mean() -> None:
    rng = np.random.default_rng(4)
    stage = rng.integers(0, 4, 1000).astype(np.int32)
    stage[stage == 2] = 1  # stage 2 has no rows: 0
    values, mask = rng.random(1000), rng.random(1000) < 0.4
    # the boolean-mask version it replaces (the same sums in the same order)
    total = np.bincount(stage[mask], weights=values[mask], minlength=5)
    count = np.bincount(stage[mask], minlength=5)
    want = np.divide(total, count, out=np.zeros(5), where=count > 0)
    got = _stage_mean(stage, values, np.flatnonzero(mask), 5)
    assert np.array_equal(got, want) and got[2] == 0.0 and got[4] == 0.0
    assert np.allclose(got[1], values[mask & (stage == 1)].mean(), rtol=1e-12)


def test_slow_communication_views_keep_their_types_on_shuffled_rows() -> None:
    """The P2P links from the shared worker view are int32 ids equal to the plain int64 formula;
    the type baselines from one sort equal the per-type scan on rows in any order."""
    from diagnosers.detectors.slow_communication import comm_mask, p2p_links, type_baseline

    spec = ScenarioSpec(dp=3, pp=4, microbatches=6, steps=3, seed=8, scenarios=["slow-communication"])
    trace = generate(spec).trace
    trace.ops = trace.ops.take(np.random.default_rng(3).permutation(len(trace.ops)))
    stats = compute_stats(trace, whatif.build_engine(trace))
    assert stats.probe is not None
    is_p2p, link = p2p_links(stats)
    assert link.dtype == np.int32 and (link[~is_p2p] == -1).all()
    # the plain ids: sends of stage s and receives of s + 1 on link d * pp + s, the reverse too
    names = [OPTYPES[int(c)] for c in stats.optype]
    up = [n in ("forward-send", "backward-recv") for n in names]  # the link to the stage above
    lower = np.array([s - (not u) for u, s in zip(up, stats.op_pp.tolist(), strict=True)])
    ok = is_p2p & (lower >= 0) & (lower < stats.pp - 1)
    want_link = np.where(ok, stats.op_dp.astype(np.int64) * stats.pp + lower, -1)
    assert np.array_equal(link, want_link)
    transfer, is_comm = stats.probe.original, comm_mask(stats)
    want = np.zeros_like(transfer)
    for code in np.unique(stats.optype[is_comm]):
        m = stats.optype == code
        want[m] = np.percentile(transfer[m], 25)
    assert np.array_equal(type_baseline(stats, transfer, is_comm), want)


@pytest.mark.parametrize("interleaved", [False, True])
def test_pairing_keys_pair_like_the_plain_keys(interleaved: bool) -> None:
    """The renumbered (stage, chunk) keys give np.intersect1d's pairs of the plain keys, in its
    order, in a key space about the size of the keys."""
    from diagnosers.detectors.stats import BWD, FWD, _pairing_keys, _step_index
    from diagnosers.readers.validate import common_keys

    spec = (
        ScenarioSpec(dp=3, pp=4, vpp=2, microbatches=8, steps=3, seed=6, schedule=Schedule.INTERLEAVED)
        if interleaved
        else ScenarioSpec(dp=3, pp=4, microbatches=6, steps=3, seed=6)
    )
    trace = generate(spec).trace
    trace.ops = trace.ops.take(np.random.default_rng(9).permutation(len(trace.ops)))
    ops, dp, pp = trace.ops, trace.meta.dp, trace.meta.pp
    _, si = _step_index(ops.step)
    cell = (si * dp + ops.dp_rank) * pp + ops.stage
    fi, bi = np.flatnonzero(ops.optype == FWD), np.flatnonzero(ops.optype == BWD)
    gmax = int(max(ops.gmc.max(initial=0), 0)) + 2
    n_mb = max(int(ops.mb_id.max()), int(ops.seq_id.max()), 0) + 2
    mb = np.where(ops.mb_id >= 0, ops.mb_id, ops.seq_id).astype(np.int64)

    def microbatch(rows: np.ndarray) -> np.ndarray:
        return mb[rows]

    plain_f = (cell[fi] * gmax + ops.gmc[fi] + 1) * n_mb + mb[fi]
    plain_b = (cell[bi] * gmax + ops.gmc[bi] + 1) * n_mb + mb[bi]
    _, want_a, want_b = np.intersect1d(plain_f, plain_b, return_indices=True)
    kf, kb, space = _pairing_keys(ops, si, cell, fi, bi, microbatch, dp, pp, gmax, n_mb)
    assert space <= 2 * (len(kf) + len(kb))  # small enough for the lookup-table pairing
    got_a, got_b = common_keys(kf, kb, space)
    assert np.array_equal(got_a, want_a) and np.array_equal(got_b, want_b)
    # a chunk id out of range keeps the plain keys
    ops.gmc[fi[0]] = -5
    kf, kb, _ = _pairing_keys(ops, si, cell, fi, bi, microbatch, dp, pp, gmax, n_mb)
    assert np.array_equal(kf, (cell[fi] * gmax + ops.gmc[fi] + 1) * n_mb + mb[fi])


def _plain_forward_backward(trace):  # type: ignore[no-untyped-def]
    """The forward/backward pairing written out plainly: the plain keys and np.intersect1d, a
    per-group np.median loop, every per-pair quantity as one expression, one mask per stage."""
    from diagnosers.detectors.stats import BWD, FWD, OUTLIER_REL, OUTLIER_Z, _step_index

    ops, dp, pp = trace.ops, trace.meta.dp, trace.meta.pp
    _, si = _step_index(ops.step)
    cell = (si * dp + ops.dp_rank) * pp + ops.stage
    gmax = int(max(ops.gmc.max(initial=0), 0)) + 2
    n_mb = max(int(max(ops.mb_id.max(initial=0), 0)), int(max(ops.seq_id.max(initial=0), 0))) + 2
    mb = np.where(ops.mb_id >= 0, ops.mb_id, ops.seq_id).astype(np.int64)
    fi, bi = np.flatnonzero(ops.optype == FWD), np.flatnonzero(ops.optype == BWD)
    kf = (cell[fi] * gmax + ops.gmc[fi] + 1) * n_mb + mb[fi]
    kb = (cell[bi] * gmax + ops.gmc[bi] + 1) * n_mb + mb[bi]
    _, a, b = np.intersect1d(kf, kb, return_indices=True)
    fi, bi = fi[a], bi[b]
    fd, bd = ops.duration[fi], ops.duration[bi]
    stage = ops.stage[fi].astype(np.int64)

    def by(group: np.ndarray, values: np.ndarray) -> np.ndarray:
        out = np.empty(len(values))
        for g in np.unique(group):
            out[group == g] = np.median(values[group == g])
        return out

    chunk = stage * gmax + ops.gmc[fi].astype(np.int64) + 1
    tf, tb = by(chunk, fd), by(chunk, bd)
    nf = np.divide(fd, tf, out=np.ones_like(fd), where=tf > 0)
    nb = np.divide(bd, tb, out=np.ones_like(bd), where=tb > 0)
    wgroup = cell[fi] * gmax + ops.gmc[fi] + 1
    wf, wb = by(wgroup, fd), by(wgroup, bd)
    xf = np.divide(fd, wf, out=np.ones_like(fd), where=wf > 0)
    xb = np.divide(bd, wb, out=np.ones_like(bd), where=wb > 0)
    excess = fd - tf * np.maximum(1.0, nb)
    med = by(stage, excess)
    mad = by(stage, np.abs(excess - med))
    z = (excess - med) / np.maximum(1.4826 * mad, 0.01 * tf)
    keep = ~((z >= OUTLIER_Z) & (excess >= OUTLIER_REL * tf))

    def corr(x: np.ndarray, y: np.ndarray) -> dict[int, float]:
        found = {}
        for s in range(pp):
            m = (stage == s) & keep
            if m.sum() >= 3 and x[m].std() > 0 and y[m].std() > 0:
                found[s] = float(np.corrcoef(x[m], y[m])[0, 1])
        return found

    b_excess = bd - tb * np.maximum(1.0, nf)
    b_med = by(stage, b_excess)
    b_mad = by(stage, np.abs(b_excess - b_med))
    b_z = (b_excess - b_med) / np.maximum(1.4826 * b_mad, 0.01 * tb)
    outliers = int(((b_z >= OUTLIER_Z) & (b_excess >= OUTLIER_REL * tb)).sum())
    return corr(nf, nb), corr(xf, xb), fi, excess, z, tf, outliers


@pytest.mark.parametrize(
    "name",
    ["gc", "seq-interleaved", "gpipe-shuffled"],
)
def test_forward_backward_pairing_matches_the_plain_computation(name: str) -> None:
    """The pairing's keys, medians and per-pair quantities made in place, with its arrays let go
    as read, give the plain computation's values to the last bit (forward rows, excess, z,
    typical forward, both correlations, the backward outliers)."""
    from diagnosers.detectors.stats import _forward_backward

    specs = {
        "gc": ScenarioSpec(dp=4, pp=4, microbatches=8, steps=4, seed=34, scenarios=["gc-pause"]),
        "seq-interleaved": ScenarioSpec(
            dp=3, pp=4, vpp=2, microbatches=8, steps=3, seed=6, schedule=Schedule.INTERLEAVED,
            scenarios=["sequence-length-imbalance"],
        ),
        "gpipe-shuffled": ScenarioSpec(dp=2, pp=3, microbatches=6, steps=3, seed=5, schedule=Schedule.GPIPE),
    }
    trace = generate(specs[name]).trace
    if name == "gpipe-shuffled":  # rows out of (step, worker) order: the medians' general paths
        trace.ops = trace.ops.take(np.random.default_rng(2).permutation(len(trace.ops)))
    want = _plain_forward_backward(trace)
    _, si = _step_index(trace.ops.step)
    stats = compute_stats(trace)
    corr, within, fi, excess, z, tf, outliers = _forward_backward(trace, si)
    for got in (
        (corr.make(), within, fi, excess, z, tf, outliers.make()),
        (stats.fwd_bwd_corr, stats.fwd_bwd_corr_within, stats.fwd_index, stats.fwd_excess,
         stats.fwd_excess_z, stats.fwd_typical, stats.bwd_outliers),
    ):
        assert got[0] == want[0] and got[1] == want[1] and got[6] == want[6]
        assert len(want[2]) > 0 and np.array_equal(got[2], want[2])
        for g, w in zip(got[3:6], want[3:6], strict=True):
            assert g.tobytes() == w.tobytes()
    if name == "gc":
        assert (want[4] >= 8).any()  # the pauses stand out: the outlier rule is exercised


def test_cell_ids_are_the_int64_cells_in_the_narrowest_width_that_holds_them() -> None:
    from diagnosers.detectors.base import cell_ids

    rng = np.random.default_rng(5)
    si = rng.integers(0, 50, 2000).astype(np.int64)
    worker = rng.integers(0, 96, 2000).astype(np.int32)
    want = si * 96 + worker.astype(np.int64)
    got = cell_ids(si, worker, 96, 50)
    assert got.dtype == np.int32 and np.array_equal(got, want)
    # a cell space past int32 (2^31 cells and more): int64, the same ids
    wide = cell_ids(si, worker, 96, 2**31 // 96 + 1)
    assert wide.dtype == np.int64 and np.array_equal(wide, want)
    far = 2**31 // 96 + 5  # a step whose cells lie past 2^31
    big = cell_ids(np.array([far], dtype=np.int64), np.array([95], dtype=np.int32), 96, far + 1)
    assert big.dtype == np.int64 and int(big[0]) == far * 96 + 95
