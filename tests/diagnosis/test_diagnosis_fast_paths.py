"""The diagnosis's cheaper computations against the plain ones they replace: op-type masks by
comparison, per-row gathers through the step-major layout, the lone-call test by one lookup, the
slow-link test by leave-one-out medians of the whole matrix."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from diagnosers import whatif
from diagnosers.detectors import compute_stats
from diagnosers.detectors.slow_communication import STANDOUT, alone_in_call, slow_links
from diagnosers.detectors.stats import _equal_runs, _group_median
from diagnosers.model import OPTYPE_CODE
from diagnosers.npplain import median
from diagnosers.synth import ScenarioSpec, generate
from diagnosers.synth.spec import Scenario, Schedule

FWD_CODE = OPTYPE_CODE["forward-compute"]


def _job(interleaved: bool, shuffle: bool) -> Any:
    spec = (
        ScenarioSpec(dp=3, pp=4, vpp=2, microbatches=8, steps=3, seed=4, schedule=Schedule.INTERLEAVED)
        if interleaved
        else ScenarioSpec(dp=3, pp=4, microbatches=6, steps=3, seed=4)
    )
    trace = generate(spec).trace
    if shuffle:  # rows in no particular order: the layouts must not rely on the stored order
        order = np.random.default_rng(1).permutation(len(trace.ops))
        trace.ops = trace.ops.take(order)
    return trace


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
def test_gather_is_the_node_major_read(interleaved: bool, shuffle: bool) -> None:
    trace = _job(interleaved, shuffle)
    eng = whatif.build_engine(trace)
    t = eng.template
    # stored rows come in step order (read one step at a time), shuffled ones do not
    assert (t.step_row_bounds() is None) == shuffle
    for dense in (eng.orig_dense, eng.launch_dense, eng.start_dense):
        want = dense.reshape(-1)[t.flat_index]
        assert np.array_equal(t.gather(dense), want, equal_nan=True)
    stacked = np.stack([eng.orig_dense, eng.launch_dense])  # leading axes: the plain read
    assert np.array_equal(t.gather(stacked), stacked.reshape(2, -1)[:, t.flat_index], equal_nan=True)
    assert np.array_equal(eng.original, eng.orig_dense.reshape(-1)[t.flat_index], equal_nan=True)


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
def test_masked_runs_are_the_runs_of_their_vectors(interleaved: bool, shuffle: bool) -> None:
    """A masked scenario, scattered through the step-major index, simulates as the plain vector
    ``np.where(mask, ideal, original)`` (or the reverse) does, to the bit; every cell holds an op
    exactly when the rows fill the dense layout."""
    trace = _job(interleaved, shuffle)
    eng = whatif.build_engine(trace)
    t = eng.template
    assert eng.fills_every_cell == (len(np.unique(t.flat_index)) == t.n_nodes * t.dp * len(eng.steps))
    rng = np.random.default_rng(11)
    masks = [rng.random(len(trace.ops)) < q for q in (0.05, 0.4)]
    masks.append(trace.ops.optype == FWD_CODE)
    # the masks' dense layout: the masked rows' node-major positions scattered, every other cell
    # False; for a few rows, all but a few and none too (their own paths)
    few = np.zeros(len(trace.ops), dtype=bool)
    few[rng.choice(len(few), 5, replace=False)] = True
    laid = [*masks, few, ~few, np.zeros_like(few), np.ones_like(few)]
    plain = np.zeros((len(laid), t.n_nodes * t.dp * len(eng.steps)), dtype=bool)
    for i, m in enumerate(laid):
        plain[i, t.flat_index[m]] = True
    assert np.array_equal(eng.dense_masks(laid), plain.reshape(len(laid), t.n_nodes, t.dp, len(eng.steps)))
    for inside in (True, False):
        got = eng.simulate_masked(masks, ideal_inside=inside)
        vectors = [np.where(m, eng.ideal, eng.original) if inside else np.where(m, eng.original, eng.ideal)
                   for m in masks]
        assert np.array_equal(got, eng.simulate(np.stack(vectors)))


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
def test_runs_of_few_changed_rows_are_the_runs_of_their_vectors(interleaved: bool, shuffle: bool) -> None:
    """A scenario changing few rows of the original runs on the dense original with those cells
    written (``WhatIfEngine._simulate_changed``): the step times of every row scattered, to the
    bit, for one worker's compute scaled, single rows (NaN, -0.0 and 0.0 among them) and two
    scenarios at once; past the bound the rows are scattered as before."""
    trace = _job(interleaved, shuffle)
    eng = whatif.build_engine(trace)
    original = eng.original  # made, as the probe makes it
    assert eng.fills_every_cell
    ops = trace.ops
    worker = (ops.dp_rank == 1) & (ops.stage == 2) & (ops.optype == FWD_CODE)
    slower = original.copy()
    slower[worker] *= 1.7
    odd = original.copy()
    rng = np.random.default_rng(5)
    at = rng.choice(len(odd), 6, replace=False)
    odd[at] = [np.nan, -0.0, 0.0, 1e-9, odd[at[4]] * 3, 0.5]
    cases = [slower[None], odd[None], np.stack([slower, odd]), original[None]]
    for d in cases:
        rows = eng._changed_rows(d)
        assert rows is not None
        assert np.array_equal(eng.simulate(d), eng._simulate_rows(d, None), equal_nan=True)
    many = original * 1.01  # every row changed: the rows' scatter
    assert eng._changed_rows(many[None]) is None
    assert np.array_equal(eng.simulate(many), eng._simulate_rows(many[None], None))


def test_of_types_is_isin() -> None:
    trace = _job(False, True)
    stats = compute_stats(trace, whatif.build_engine(trace))
    codes = np.unique(stats.optype).tolist()
    for wanted in ([codes[0]], codes[:2], codes[1:4], codes[:5], codes, [codes[-1], 99]):
        got = stats.of_types(wanted)
        assert got.dtype == np.bool_ and np.array_equal(got, np.isin(stats.optype, wanted))


def test_alone_in_call_counts_each_batch() -> None:
    rng = np.random.default_rng(5)
    batch = rng.integers(-1, 40, 3000)
    batch[batch == 7] = -1
    batch[:1] = 41  # an id no other row shares
    counts = {int(b): int((batch == b).sum()) for b in np.unique(batch)}
    want = np.array([b < 0 or counts[int(b)] == 1 for b in batch])
    assert np.array_equal(alone_in_call(batch), want)
    assert alone_in_call(np.full(5, -1)).all() and not alone_in_call(np.zeros(5, dtype=np.int64)).any()
    assert alone_in_call(np.zeros(0, dtype=np.int64)).shape == (0,)


def _slow_links_loop(dp: int, pp: int, link: np.ndarray, ratio: np.ndarray) -> np.ndarray:
    """The per-link loop the matrix form replaced."""
    on = link >= 0
    sums = np.bincount(link[on], weights=ratio[on], minlength=dp * pp)
    counts = np.bincount(link[on], minlength=dp * pp)
    per_link = np.divide(sums, counts, out=np.zeros(dp * pp), where=counts > 0).reshape(dp, pp)
    out = np.zeros((dp, pp), dtype=bool)
    for d in range(dp):
        for s in range(pp - 1):
            peers = np.delete(per_link[:, s], d)
            ref = float(median(peers)) if peers.size else 1.0
            out[d, s] = per_link[d, s] >= STANDOUT and per_link[d, s] >= STANDOUT * ref
    return out


@pytest.mark.parametrize(("dp", "pp"), [(1, 4), (2, 3), (5, 4), (8, 2), (6, 1)])
def test_slow_links_is_the_per_link_loop(dp: int, pp: int) -> None:
    rng = np.random.default_rng(dp * 10 + pp)
    n = 50 * dp * pp
    link = rng.integers(-1, dp * pp, n)
    ratio = rng.lognormal(0.0, 0.6, n)
    ratio[link == dp * pp - 2] *= 4.0  # a slow link (when it exists)
    ratio[rng.random(n) < 0.1] = 1.0  # ties
    stats = SimpleNamespace(dp=dp, pp=pp)

    def view(link: np.ndarray, ratio: np.ndarray) -> Any:  # the per-link sums P2PRows holds
        on = link >= 0
        return SimpleNamespace(
            link_ratio_sum=np.bincount(link[on], weights=ratio[on], minlength=dp * pp),
            link_n=np.bincount(link[on], minlength=dp * pp),
        )

    assert np.array_equal(slow_links(stats, view(link, ratio)), _slow_links_loop(dp, pp, link, ratio))  # type: ignore[arg-type]
    # every link tied with its peers, and links without any transfer
    flat = np.ones(n)
    tied = slow_links(stats, view(link, flat))  # type: ignore[arg-type]
    assert np.array_equal(tied, _slow_links_loop(dp, pp, link, flat))
    none = np.full(n, -1)
    assert not slow_links(stats, view(none, ratio)).any()  # type: ignore[arg-type]


@pytest.mark.parametrize("interleaved", [False, True])
def test_p2p_rows_link_sums_are_the_on_link_sums(interleaved: bool) -> None:
    from diagnosers.detectors.slow_communication import comm_mask, p2p_links, p2p_rows, type_baseline

    spec = ScenarioSpec(dp=3, pp=4, microbatches=6, steps=3, seed=8, scenarios=[Scenario.SLOW_COMMUNICATION])
    if interleaved:
        spec = ScenarioSpec(
            dp=3, pp=4, vpp=2, microbatches=8, steps=3, seed=8, schedule=Schedule.INTERLEAVED,
            scenarios=[Scenario.SLOW_COMMUNICATION],
        )
    trace = generate(spec).trace
    stats = compute_stats(trace, whatif.build_engine(trace))
    assert stats.probe is not None
    transfer = stats.probe.original
    base = type_baseline(stats, transfer, comm_mask(stats))
    links = p2p_links(stats)
    kept = transfer.copy(), base.copy()
    v = p2p_rows(stats, transfer, base, links)
    # the per-row views made in place are the plain expressions, and the inputs stay as they were
    rows = np.flatnonzero(links[0])
    assert np.array_equal(v.rows, rows)
    assert np.array_equal(transfer, kept[0]) and np.array_equal(base, kept[1])
    assert np.array_equal(v.ratio, transfer[rows] / np.maximum(base[rows], 1e-12))
    excess = np.clip(transfer[rows] - base[rows], 0.0, None)
    n = stats.dp * stats.pp
    on = v.link >= 0
    assert np.array_equal(v.link_excess_sum, np.bincount(v.link[on], weights=excess[on], minlength=n))
    worker = stats.op_worker[rows]
    assert np.array_equal(v.worker_excess_sum, np.bincount(worker, weights=excess, minlength=n))
    assert np.array_equal(v.link_ratio_sum, np.bincount(v.link[on], weights=v.ratio[on], minlength=n))
    assert np.array_equal(v.link_n, np.bincount(v.link[on], minlength=n))
    assert v.link_n.sum() == on.sum() > 0


@pytest.mark.parametrize("schedule", [Schedule.ONE_F_ONE_B, Schedule.GPIPE, Schedule.INTERLEAVED])
@pytest.mark.parametrize("shuffle", [False, True])
def test_p2p_sums_off_the_dense_layout_are_the_rows_sums(schedule: Schedule, shuffle: bool) -> None:
    # the P2P view's sums read off the dense layout (per-type baselines, the probe's transfers)
    # against the bincounts over the gathered rows (full-length baselines), to 1e-12 relative (the
    # same terms in another order), the counts exactly; the per-row views are the rows' either way
    from diagnosers.detectors.slow_communication import (
        FR,
        FS,
        PerType,
        comm_mask,
        p2p_links,
        p2p_rows,
        type_baseline,
        type_baseline_table,
    )

    vpp = 2 if schedule == Schedule.INTERLEAVED else 1
    spec = ScenarioSpec(
        dp=3, pp=4, vpp=vpp, microbatches=8, steps=3, seed=8, schedule=schedule,
        scenarios=[Scenario.SLOW_COMMUNICATION],
    )
    trace = generate(spec).trace
    if shuffle:
        trace.ops = trace.ops.take(np.random.default_rng(1).permutation(len(trace.ops)))
    engine = whatif.build_engine(trace)
    stats = compute_stats(trace, engine)
    assert stats.probe is not None
    transfer, is_comm = stats.probe.original, comm_mask(stats)
    blocks = engine.type_blocks([FS, FR])
    has = np.isin(trace.ops.optype, [FS, FR])
    present = sorted(set(zip(trace.ops.stage[has].tolist(), trace.ops.optype[has].tolist(), strict=True)))
    assert blocks is not None and [(s, o) for s, o, _ in blocks] == present
    for s, o, block in blocks:  # each block: its (stage, type)'s durations, every cell
        of = has & (trace.ops.stage == s) & (trace.ops.optype == o)
        assert block.shape[1:] == (3, 3) and np.array_equal(np.sort(block, axis=None), np.sort(transfer[of]))
    links = p2p_links(stats)
    rows_way = p2p_rows(stats, transfer, type_baseline(stats, transfer, is_comm), links)
    table = PerType(type_baseline_table(stats, transfer, is_comm), stats.optype)
    dense_way = p2p_rows(stats, transfer, table, links)
    assert "views" not in dense_way._made  # the per-row views not made until read
    n = stats.dp * stats.pp
    is_p2p, link = links
    excess = np.clip(transfer - table[np.arange(len(transfer))], 0.0, None)
    ratio = transfer / np.maximum(table[np.arange(len(transfer))], 1e-12)
    on = is_p2p & (link >= 0)
    plain = {
        "worker_excess_sum": np.bincount(stats.op_worker[is_p2p], weights=excess[is_p2p], minlength=n),
        "worker_ratio_sum": np.bincount(stats.op_worker[is_p2p], weights=ratio[is_p2p], minlength=n),
        "worker_n": np.bincount(stats.op_worker[is_p2p], minlength=n),
        "link_excess_sum": np.bincount(link[on], weights=excess[on], minlength=n),
        "link_ratio_sum": np.bincount(link[on], weights=ratio[on], minlength=n),
        "link_n": np.bincount(link[on], minlength=n),
    }
    for name, want in plain.items():
        assert np.array_equal(getattr(rows_way, name), want), name  # the rows' own way: to the bit
        got = getattr(dense_way, name)
        assert got.shape == want.shape and got.dtype == want.dtype, name
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0, err_msg=name)
    assert plain["link_n"].sum() > 0 and plain["worker_excess_sum"].sum() > 0
    for name in ("rows", "link", "ratio"):
        assert np.array_equal(getattr(dense_way, name), getattr(rows_way, name)), name
    # off the dense path: a copy of the transfers, or P2P rows not the statistics' own
    copied = p2p_rows(stats, transfer.copy(), table, links)
    assert np.array_equal(copied.worker_excess_sum, plain["worker_excess_sum"])
    other = p2p_rows(stats, transfer, table, (is_p2p.copy(), link))
    assert np.array_equal(other.link_ratio_sum, plain["link_ratio_sum"])


def test_type_blocks_are_none_for_a_reader_stated_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    # a trace whose reader states its graph (kernel-level) gives no blocks: its nodes are no
    # (stage, type) runs of the rows' op types; nor does one whose template is not the meta's shape
    trace = _job(interleaved=False, shuffle=False)
    engine = whatif.build_engine(trace)
    assert engine.type_blocks([FWD_CODE]) is not None
    monkeypatch.setattr(trace, "graph", object())
    assert engine.type_blocks([FWD_CODE]) is None
    monkeypatch.setattr(trace, "graph", None)
    monkeypatch.setattr(engine.template, "pp", 2)
    assert engine.type_blocks([FWD_CODE]) is None


@pytest.mark.parametrize(
    "layout", ["sorted", "blocks", "split run", "unequal runs", "one group", "single rows", "long runs"]
)
def test_group_median_on_runs_matches_a_loop(layout: str) -> None:
    # groups stored as runs of rows take the in-place path; near misses must not
    rng = np.random.default_rng(len(layout))
    size = {"single rows": 1, "long runs": 301}.get(layout, 6)
    ids = np.arange(40) * 3 - 7
    if layout == "blocks":
        ids = rng.permutation(ids)
    if layout == "one group":
        ids = ids[:1]
    group = np.repeat(ids, size)
    if layout == "split run":  # the first group's rows in two runs
        group = np.r_[group[size // 2 : size], group[size:], group[: size // 2]]
    if layout == "unequal runs":
        group = np.r_[group, group[-1:]]
    values = np.round(rng.normal(size=len(group)), 1)  # many ties
    want = np.empty(len(group))
    for g in np.unique(group):
        rows = group == g
        want[rows] = np.median(values[rows])
    assert np.array_equal(_group_median(group.astype(np.int64), values), want, equal_nan=True)
    runs = _equal_runs(group.astype(np.int64))
    assert runs == (size if layout not in ("split run", "unequal runs") else 0)


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
def test_vector_runs_match_the_node_major_scatter(interleaved: bool, shuffle: bool) -> None:
    from diagnosers.simulate import simulate

    trace = _job(interleaved, shuffle)
    eng = whatif.build_engine(trace)
    t = eng.template
    dp, ns = eng.shape
    rng = np.random.default_rng(2)
    for k in (1, 3):
        d = eng.original[None] * rng.uniform(0.5, 1.5, (k, len(eng.original)))
        flat = np.empty((t.n_nodes * dp * ns, k))  # the scatter the step-major one replaced
        flat[t.flat_index] = d.T
        dense = np.moveaxis(flat.reshape(t.n_nodes, dp, ns, k), 3, 1)
        want = simulate(t, dense, (k, dp, ns)).step_times
        assert np.array_equal(eng.simulate(d), want)


def _coherence_both_ways(
    trace: Any, monkeypatch: pytest.MonkeyPatch, engine: bool = True
) -> tuple[Any, Any, bool]:
    """The coherence test with its complete-grid path and with the grouped medians alone."""
    from diagnosers.detectors import sequence_length as sl

    stats = compute_stats(trace, whatif.build_engine(trace) if engine else None)
    fired: list[bool] = []
    grid = sl._normalised_grid

    def spy(*args: Any) -> Any:
        out = grid(*args)
        fired.append(out is not None)
        return out

    monkeypatch.setattr(sl, "_normalised_grid", spy)
    fast = sl._coherence(stats)
    monkeypatch.setattr(sl, "_normalised_grid", lambda *args: None)
    plain = sl._coherence(stats)
    return fast, plain, bool(fired and fired[0])


@pytest.mark.parametrize(
    ("spec", "complete"),
    [
        (ScenarioSpec(dp=4, pp=4, microbatches=8, steps=3, seed=1), True),
        (ScenarioSpec(dp=1, pp=4, microbatches=8, steps=3, seed=2), True),
        (
            ScenarioSpec(
                dp=4, pp=2, microbatches=8, steps=4, seed=3, scenarios=[Scenario.SEQUENCE_LENGTH_IMBALANCE]
            ),
            True,
        ),
        (ScenarioSpec(dp=3, pp=4, microbatches=6, steps=3, seed=4, schedule=Schedule.GPIPE), True),
        (
            ScenarioSpec(dp=2, pp=4, vpp=2, microbatches=8, steps=3, seed=5, schedule=Schedule.INTERLEAVED),
            True,
        ),
        (ScenarioSpec(dp=3, pp=2, microbatches=4, steps=3, seed=6, first_step=5), True),
    ],
)
@pytest.mark.parametrize("shuffle", [False, True])
def test_coherence_grid_is_the_grouped_medians(
    spec: ScenarioSpec, complete: bool, shuffle: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = generate(spec).trace
    if shuffle:
        trace.ops = trace.ops.take(np.random.default_rng(1).permutation(len(trace.ops)))
    fast, plain, fired = _coherence_both_ways(trace, monkeypatch)
    assert fired == complete
    assert fast == plain


def test_coherence_grid_falls_back_on_a_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    # a forward without a transfer time, a missing forward, a duplicated one: no complete grid,
    # the grouped medians decide (the last two the engine refuses: statistics without it)
    trace = generate(ScenarioSpec(dp=4, pp=2, microbatches=8, steps=3, seed=7)).trace
    fwd = np.flatnonzero(trace.ops.optype == FWD_CODE)
    keep = np.ones(len(trace.ops), dtype=bool)
    keep[fwd[5]] = False
    zero = trace.ops.take(np.arange(len(trace.ops)))
    zero.duration[fwd[2]] = 0.0
    cases = [(zero, True), (trace.ops.take(np.flatnonzero(keep)), False)]
    cases.append((trace.ops.take(np.r_[np.arange(len(trace.ops)), fwd[3]]), False))
    for ops, engine in cases:
        trace.ops = ops
        fast, plain, fired = _coherence_both_ways(trace, monkeypatch, engine)
        assert not fired and fast == plain


def test_coherence_grid_needs_every_cell_once() -> None:
    # as many rows as cells but one cell twice (another left empty), or a NaN among the values:
    # no grid; every cell once in any row order: the grid is the values at their cells, both
    # medians taken out
    from diagnosers.detectors.sequence_length import _median_along, _normalised_grid

    rng = np.random.default_rng(3)
    n_s, dp, n_mb, n_c = 3, 4, 5, 2
    si, d, mb, col = (a.reshape(-1) for a in np.meshgrid(
        np.arange(n_s), np.arange(dp), np.arange(n_mb) + 2, np.arange(n_c) * 3, indexing="ij"
    ))
    order = rng.permutation(len(si))
    si, d, col = si[order].astype(np.int64), d[order].astype(np.int32), col[order]
    mb = mb[order].astype(np.int32)
    v = rng.normal(size=len(si))
    got = _normalised_grid(si, d, dp, mb, col, v)
    want = np.empty((n_c, n_s, dp, n_mb))
    want[col // 3, si, d, mb - 2] = v
    want -= _median_along(want, 3)
    want -= _median_along(want, 2)
    assert got is not None and np.array_equal(got, want.reshape(n_c, -1))
    twice = mb.copy()
    twice[np.flatnonzero((mb == 3) & (si == 0) & (d == 0) & (col == 0))] = 4  # (0, 0, 4, 0) twice
    assert _normalised_grid(si, d, dp, twice, col, v) is None
    nan = v.copy()
    nan[7] = np.nan
    assert _normalised_grid(si, d, dp, mb, col, nan) is None


@pytest.mark.parametrize("name", ["AR", "SE"])
def test_coherence_grid_on_the_study_samples(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from diagnosers.readers import load_trace
    from diagnosers.samples import artifact_trace

    fast, plain, _ = _coherence_both_ways(load_trace([artifact_trace(name)]), monkeypatch)
    assert fast == plain


def _send_floors_by_lexsort(dp: int, pp: int, optype: Any, transfer: Any, link: Any, alone: Any) -> Any:
    """The sort by (link, transfer time) the partition replaced."""
    from diagnosers.detectors.slow_communication import _DIRECTIONS, SEND_FLOOR_QUANTILE

    out = np.full((2, dp, pp), np.nan)
    for k, (code, _, _, _) in enumerate(_DIRECTIONS):
        rows = np.flatnonzero((optype == code) & alone & (link >= 0))
        if not rows.size:
            continue
        ids, t = link[rows], transfer[rows]
        order = np.lexsort((t, ids))
        n = np.bincount(ids, minlength=dp * pp)
        start = np.cumsum(n) - n
        pick = start + np.floor(SEND_FLOOR_QUANTILE * np.maximum(n - 1, 0)).astype(np.int64)
        has = n > 0
        out[k].reshape(-1)[has] = t[order][pick[has]]
    return out[:, :, : max(pp - 1, 0)]


@pytest.mark.parametrize("equal", [True, False])
def test_send_floors_match_the_sort(equal: bool) -> None:
    from diagnosers.detectors.slow_communication import _DIRECTIONS, send_floors

    dp, pp, per = 5, 4, 24
    rng = np.random.default_rng(11 + equal)
    fs, bs = _DIRECTIONS[0][0], _DIRECTIONS[1][0]
    links = np.array([d * pp + s for d in range(dp) for s in range(pp - 1)])
    link = np.repeat(links, 2 * per)
    optype = np.tile(np.r_[np.full(per, fs), np.full(per, bs)], len(links)).astype(np.int16)
    transfer = np.round(rng.lognormal(0.0, 0.5, len(link)), 2)  # ties
    alone = np.ones(len(link), dtype=bool)
    if not equal:  # some sends in batched calls, one link without lone forward sends, off-link rows
        alone = rng.random(len(link)) < 0.7
        alone[(link == links[3]) & (optype == fs)] = False
        link = np.where(rng.random(len(link)) < 0.05, -1, link)
    stats = SimpleNamespace(dp=dp, pp=pp, optype=optype)
    got = send_floors(stats, transfer, link, alone)  # type: ignore[arg-type]
    want = _send_floors_by_lexsort(dp, pp, optype, transfer, link, alone)
    assert np.array_equal(got, want, equal_nan=True)


def test_transient_reads_each_candidates_rows() -> None:
    from diagnosers.detectors.slow_communication import (
        TRANSIENT_SHARE,
        comm_mask,
        probe_candidates,
        transient,
        type_baseline,
    )

    spec = ScenarioSpec(dp=4, pp=4, microbatches=8, steps=4, seed=3, scenarios=[Scenario.SLOW_COMMUNICATION])
    trace = generate(spec).trace
    stats = compute_stats(trace, whatif.build_engine(trace))
    assert stats.probe is not None
    transfer = stats.probe.original
    base = type_baseline(stats, transfer, comm_mask(stats))
    scored = probe_candidates(stats)
    # a candidate of one step's rows: transient by construction
    one_step = comm_mask(stats) & (stats.op_step_index == 1)
    scored = [*scored, ("one step", [(0, 0)], one_step)]
    excess = np.clip(transfer - base, 0.0, None)  # the full-length excess it replaced
    want = []
    for _, _, mask in scored:
        per_step = np.bincount(stats.op_step_index[mask], weights=excess[mask], minlength=stats.n_steps)
        total = float(per_step.sum())
        want.append(total > 0 and float(per_step.max()) > TRANSIENT_SHARE * total)
    assert len(scored) > 2 and transient(stats, transfer, base, scored) == want and want[-1]


def test_lone_send_floors_are_made_once_of_the_shared_arrays() -> None:
    from diagnosers.detectors.slow_communication import (
        lone_send_floors,
        p2p_batch_ids,
        p2p_links,
        send_floors,
    )

    spec = ScenarioSpec(dp=4, pp=4, microbatches=8, steps=4, seed=3, scenarios=[Scenario.SLOW_COMMUNICATION])
    trace = generate(spec).trace
    stats = compute_stats(trace, whatif.build_engine(trace))
    assert stats.probe is not None
    transfer, link, batch = stats.probe.original, p2p_links(stats)[1], p2p_batch_ids(stats)
    want = send_floors(stats, transfer, link, alone_in_call(batch))
    got = lone_send_floors(stats, transfer, link, batch)
    assert np.isfinite(want).any() and np.array_equal(got, want, equal_nan=True)
    assert lone_send_floors(stats, transfer, link, batch) is got  # the shared arrays: made once
    # any other array (here other transfer times) is computed afresh, never read from the memo
    other = transfer * 2.0
    fresh = lone_send_floors(stats, other, link, batch)
    assert np.array_equal(fresh, send_floors(stats, other, link, alone_in_call(batch)), equal_nan=True)
    assert not np.array_equal(fresh, got, equal_nan=True)


def _plain_forward_backward(trace: Any, si: np.ndarray) -> tuple[dict[int, float], int]:
    """The stage-level fwd/bwd correlations and the backward-outlier count the plain way: each
    forward paired with its backward by a dictionary of (step, worker, chunk, microbatch), group
    medians by ``np.median`` per (stage, chunk) and per stage, one mask per stage."""
    from diagnosers.detectors.stats import BWD, FWD, OUTLIER_REL, OUTLIER_Z

    ops = trace.ops
    mb = np.where(ops.mb_id >= 0, ops.mb_id, ops.seq_id)
    columns = (si, ops.dp_rank, ops.stage, ops.gmc, mb)
    key = list(zip(*(c.tolist() for c in columns), strict=True))
    back = {key[i]: i for i in np.flatnonzero(ops.optype == BWD).tolist()}
    pairs = [(i, back[key[i]]) for i in np.flatnonzero(ops.optype == FWD).tolist() if key[i] in back]
    fi, bi = (np.array(x) for x in zip(*pairs, strict=True))
    fd, bd, stage, gmc = ops.duration[fi], ops.duration[bi], ops.stage[fi], ops.gmc[fi]

    def by(groups: np.ndarray, values: np.ndarray) -> np.ndarray:
        out = np.empty_like(values)
        for g in np.unique(groups):
            out[groups == g] = np.median(values[groups == g])
        return out

    chunk = stage * 1000 + gmc
    tf, tb = by(chunk, fd), by(chunk, bd)
    nf, nb = fd / tf, bd / tb
    excess = fd - tf * np.maximum(1.0, nb)
    med = by(stage, excess)
    z = (excess - med) / np.maximum(1.4826 * by(stage, np.abs(excess - med)), 0.01 * tf)
    clean = ~((z >= OUTLIER_Z) & (excess >= OUTLIER_REL * tf))
    corr = {}
    for s in np.unique(stage).tolist():
        m = (stage == s) & clean
        if m.sum() >= 3 and nf[m].std() > 0 and nb[m].std() > 0:
            corr[s] = float(np.corrcoef(nf[m], nb[m])[0, 1])
    b_excess = bd - tb * np.maximum(1.0, nf)
    b_med = by(stage, b_excess)
    b_z = (b_excess - b_med) / np.maximum(1.4826 * by(stage, np.abs(b_excess - b_med)), 0.01 * tb)
    return corr, int(((b_z >= OUTLIER_Z) & (b_excess >= OUTLIER_REL * tb)).sum())


@pytest.mark.parametrize("shuffle", [False, True])
def test_statistics_made_on_first_read_are_the_plain_ones(shuffle: bool) -> None:
    from dataclasses import replace

    from diagnosers.detectors.base import Deferred
    from diagnosers.detectors.stats import _launch_idle

    spec = ScenarioSpec(dp=4, pp=3, microbatches=8, steps=4, seed=21,
                        scenarios=[Scenario.GC_PAUSE, Scenario.DATALOADER_STALL])
    trace = generate(spec).trace
    from diagnosers.detectors.stats import BWD

    paused = np.flatnonzero(trace.ops.optype == BWD)[[5, 40, 77]]
    trace.ops.duration[paused] *= 4.0  # three backwards that look paused: outliers to count
    if shuffle:
        trace.ops = trace.ops.take(np.random.default_rng(2).permutation(len(trace.ops)))
    stats = compute_stats(trace)
    lazy = ("launch_idle", "fwd_bwd_corr", "bwd_outliers", "stage_fwd_mean", "stage_bwd_mean")
    # nothing made before it is read
    assert all(isinstance(stats.__dict__[f"_deferred_{name}"], Deferred) for name in lazy)
    ops = trace.ops
    si = stats.op_step_index
    cell = (si * stats.dp + ops.dp_rank) * stats.pp + ops.stage
    step_start = np.array([ops.start_ts[si == k].min() for k in range(stats.n_steps)])
    step_end = np.array([(ops.start_ts + ops.duration)[si == k].max() for k in range(stats.n_steps)])
    size = stats.n_steps * stats.dp * stats.pp
    idle = _launch_idle(
        ops.optype, ops.start_ts, ops.duration, cell, si, step_start, size, step_end, stats.steps
    )
    assert np.array_equal(stats.launch_idle, idle.reshape(stats.n_steps, stats.dp, stats.pp))
    assert stats.launch_idle.max() > 0  # the injected stall
    corr, outliers = _plain_forward_backward(trace, si)
    assert stats.fwd_bwd_corr.keys() == corr.keys() and len(corr) == stats.pp
    assert all(abs(stats.fwd_bwd_corr[s] - c) < 1e-12 for s, c in corr.items())
    assert stats.bwd_outliers == outliers == 3
    for code, got in ((OPTYPE_CODE["forward-compute"], stats.stage_fwd_mean),
                      (OPTYPE_CODE["backward-compute"], stats.stage_bwd_mean)):
        want = [ops.duration[(ops.optype == code) & (ops.stage == s)].mean() for s in range(stats.pp)]
        assert np.allclose(got, want, rtol=1e-12, atol=0.0)
    # made once and kept; a copy by dataclasses.replace reads (so makes) the same values
    assert stats.launch_idle is stats.launch_idle and stats.fwd_bwd_corr is stats.fwd_bwd_corr
    copy = replace(stats, steps=stats.steps)
    assert copy.launch_idle is stats.launch_idle and copy.bwd_outliers == outliers
    assert replace(stats, bwd_outliers=3).bwd_outliers == 3


@pytest.mark.parametrize("layout", ["grouped", "shuffled", "unequal"])
def test_worker_order_statistic_is_the_per_worker_sort(layout: str) -> None:
    from diagnosers.detectors.faulty_machine import worker_order_statistic

    rng = np.random.default_rng(5)
    n_workers, per = 12, 9
    worker = np.repeat(np.arange(n_workers), per)
    worker = worker[worker != 4]  # a worker without ops: NaN
    if layout == "unequal":
        worker = np.r_[worker, [7, 7, 2]]
    dur = np.round(rng.lognormal(0.0, 0.4, len(worker)), 2)  # ties
    if layout != "grouped":
        order = rng.permutation(len(worker))
        worker, dur = worker[order], dur[order]
    for fraction in (0.0, 0.1, 0.5, 1.0):
        want = np.full(n_workers, np.nan)
        for w in range(n_workers):
            mine = np.sort(dur[worker == w])
            if mine.size:
                want[w] = mine[int(np.floor(fraction * (mine.size - 1)))]
        got = worker_order_statistic(worker, dur, n_workers, fraction)
        assert np.array_equal(got, want, equal_nan=True)


def test_announced_masked_scenarios_ride_along_with_the_same_numbers() -> None:
    """Masked scenarios announced with ``Probe.ahead_masked`` run in the next batch of masked runs
    (one engine pass for both), with the numbers each gives run alone; a batch answered from the
    memo alone does not run them, and the other direction joins only as the complement."""
    from diagnosers.detectors.base import Probe

    trace = _job(False, True)
    engine = whatif.build_engine(trace)
    assert engine.fills_every_cell
    rng = np.random.default_rng(8)
    a, b, c = (rng.random(len(trace.ops)) < q for q in (0.1, 0.3, 0.5))
    passes: list[int] = []
    plain = engine.simulate_masked

    def counted(masks: Any, *, ideal_inside: bool = True) -> Any:
        passes.append(len(masks))
        return plain(masks, ideal_inside=ideal_inside)

    probe = Probe(engine)
    probe.masked_means([a])
    engine.simulate_masked = counted  # type: ignore[method-assign]
    probe.ahead_masked([b, c], [True, False])
    probe.masked_means([a])  # from the memo: no pass, the announced ones wait
    assert passes == []
    got = probe.masked_means([b])  # one pass: b, and c's reverse as its complement
    assert passes == [2]
    assert probe.masked_means([c], ideal_inside=False)[0] == probe.masked_means([~c])[0]
    assert passes == [2]
    engine.simulate_masked = plain  # type: ignore[method-assign]
    assert got[0] == np.asarray(plain([b])).mean(axis=1)[0]
    assert probe.masked_means([~c])[0] == np.asarray(plain([c], ideal_inside=False)).mean(axis=1)[0]


def test_slow_communication_plans_what_it_asks_for() -> None:
    """The scenarios slow communication announces before the detectors run are ones it asks for:
    after it has judged, none of them is left to run (every announced key is in the memo)."""
    from diagnosers.detectors import slow_communication
    from diagnosers.report_view import ReportView

    judged = 0
    for schedule, scenario in (
        (Schedule.ONE_F_ONE_B, Scenario.SLOW_COMMUNICATION),
        (Schedule.INTERLEAVED, Scenario.SLOW_COMMUNICATION),
        (Schedule.GPIPE, Scenario.FAULTY_MACHINE),
        (Schedule.ONE_F_ONE_B, Scenario.NONE),
    ):
        vpp = 2 if schedule is Schedule.INTERLEAVED else 1
        spec = ScenarioSpec(dp=3, pp=4, vpp=vpp, microbatches=8, steps=4, seed=6, schedule=schedule,
                            scenarios=[scenario])
        trace = generate(spec).trace
        engine = whatif.build_engine(trace)
        view = ReportView.of(whatif.report_json(trace, engine=engine), trace.meta)
        stats = compute_stats(trace, engine)
        assert stats.probe is not None
        masks, inside = slow_communication.planned_runs(view, stats)
        if view.slowdown < slow_communication.DECOMPOSE_THRESHOLD:
            assert masks == []
            continue
        assert masks
        judged += 1
        stats.probe.ahead_masked(masks, inside)
        announced = set(stats.probe._ahead_masks)
        slow_communication.detect(view, stats)
        assert announced <= set(stats.probe._masked)
    assert judged >= 3


@pytest.mark.parametrize("chunk", [7, 1000, 1 << 18])
def test_step_ends_by_chunks_are_the_full_reduction(chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from diagnosers.detectors import stats as stats_module
    from diagnosers.readers.normalize import reduce_into

    monkeypatch.setattr(stats_module, "_END_CHUNK", chunk)
    for shuffle in (False, True):
        trace = _job(False, shuffle)
        ops = trace.ops
        steps, si = stats_module._step_index(ops.step)
        want = reduce_into(np.maximum, si, ops.start_ts + ops.duration, len(steps), -np.inf)
        got = stats_module._step_ends(si, ops.start_ts, ops.duration, len(steps))
        assert np.array_equal(got, want)
        assert np.array_equal(compute_stats(trace).step_time, want - reduce_into(
            np.minimum, si, ops.start_ts, len(steps), np.inf))


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
def test_type_baselines_from_the_dense_layout_are_the_rows(interleaved: bool, shuffle: bool) -> None:
    """The lower quartiles read from the engine's dense layout are the ones of the rows' transfer
    times (the row path runs for any other transfer vector, here an equal copy)."""
    from diagnosers.detectors.slow_communication import comm_mask, type_baseline

    trace = _job(interleaved, shuffle)
    stats = compute_stats(trace, whatif.build_engine(trace))
    assert stats.probe is not None
    original = stats.probe.original
    assert stats.probe.type_values([FWD_CODE]) is not None  # the dense path is the one taken
    got = type_baseline(stats, original, comm_mask(stats))
    want = type_baseline(stats, original.copy(), comm_mask(stats))
    assert np.array_equal(got, want) and want.any()
    codes = np.unique(stats.optype).tolist()
    by_type = stats.probe.type_values(codes)
    assert by_type is not None and sorted(by_type) == codes
    for code, values in by_type.items():
        assert np.array_equal(np.sort(values), np.sort(original[stats.optype == code]))


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
def test_fast_op_order_statistics_from_the_dense_layout_are_the_rows(
    interleaved: bool, shuffle: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The faulty machine's fast-op statistics read from the engine's dense layout
    (``TraceStats.order_statistics``) against the same statistics from the rows."""
    from diagnosers.detectors import faulty_machine as fm
    from diagnosers.detectors.base import TraceStats

    trace = _job(interleaved, shuffle)
    stats = compute_stats(trace, whatif.build_engine(trace))
    rng = np.random.default_rng(3)
    affected = [np.ones(stats.n_steps, dtype=bool), rng.random(stats.n_steps) < 0.6,
                np.zeros(stats.n_steps, dtype=bool)]
    affected[1][0] = True
    cells = [(1, 2)]
    assert stats.order_statistics([FWD_CODE], 0.1) is not None  # the dense path is the one taken
    dense = [fm.fast_op_steps(stats)]
    for a in affected:
        dense += [fm.fast_op_factors(stats, a, cells), fm.fastest_ops(stats, a)]
    monkeypatch.setattr(TraceStats, "order_statistics", lambda *args, **kwargs: None)
    rows = [fm.fast_op_steps(stats)]
    for a in affected:
        rows += [fm.fast_op_factors(stats, a, cells), fm.fastest_ops(stats, a)]
    for got, want in zip(dense, rows, strict=True):
        assert got.shape == want.shape and np.array_equal(got, want, equal_nan=True)


def test_slow_communication_decides_before_its_candidates_masks() -> None:
    """On a job whose communication explains little and where no candidate stands out (a faulty
    machine), slow communication returns None from the all-communication run alone: its
    candidates' masks and runs are never made. On a slow link they are, and the link is found."""
    from diagnosers.detectors import slow_communication
    from diagnosers.report_view import ReportView

    found = {}
    for scenario in (Scenario.FAULTY_MACHINE, Scenario.SLOW_COMMUNICATION):
        spec = ScenarioSpec(dp=3, pp=4, microbatches=8, steps=4, seed=6, scenarios=[scenario])
        trace = generate(spec).trace
        engine = whatif.build_engine(trace)
        view = ReportView.of(whatif.report_json(trace, engine=engine), trace.meta)
        assert view.slowdown >= slow_communication.DECOMPOSE_THRESHOLD
        stats = compute_stats(trace, engine)
        match = slow_communication.detect(view, stats)
        made = ("shared", slow_communication.SHARED_CANDIDATES) in stats._cache
        found[scenario] = (match is not None, made)
    assert found == {Scenario.FAULTY_MACHINE: (False, False), Scenario.SLOW_COMMUNICATION: (True, True)}


def _cell_sums_by_rows(trace: Any, codes: tuple[int, ...]) -> np.ndarray:
    """The plain per-(step, DP rank, stage) sums of the rows' durations of the types ``codes``."""
    ops, dp, pp = trace.ops, trace.meta.dp, trace.meta.pp
    steps = np.unique(ops.step)
    si = np.searchsorted(steps, ops.step)
    keep = np.isin(ops.optype, codes)
    cell = (si * dp + ops.dp_rank) * pp + ops.stage
    return np.bincount(cell[keep], weights=ops.duration[keep], minlength=len(steps) * dp * pp).reshape(
        len(steps), dp, pp
    )


@pytest.mark.parametrize("schedule", [Schedule.ONE_F_ONE_B, Schedule.GPIPE])
@pytest.mark.parametrize("shuffle", [False, True])
def test_cell_sums_are_the_rows_sums(schedule: Schedule, shuffle: bool) -> None:
    # the dense layout's per-cell sums against a bincount over the rows, to 1e-12 relative (the
    # same terms in another order), and the statistics built on them against the rows' sums
    spec = ScenarioSpec(dp=3, pp=4, microbatches=6, steps=3, seed=4, schedule=schedule)
    trace = generate(spec).trace
    if shuffle:
        trace.ops = trace.ops.take(np.random.default_rng(1).permutation(len(trace.ops)))
    engine = whatif.build_engine(trace)
    steps = np.unique(trace.ops.step).astype(np.int64)
    for codes in ((FWD_CODE, OPTYPE_CODE["backward-compute"]), (OPTYPE_CODE["optimizer"],)):
        fast = engine.cell_sums(codes, steps)
        assert fast is not None
        np.testing.assert_allclose(fast, _cell_sums_by_rows(trace, codes), rtol=1e-12, atol=0)
    stats = compute_stats(trace, engine)
    compute, optimizer = (FWD_CODE, OPTYPE_CODE["backward-compute"]), (OPTYPE_CODE["optimizer"],)
    np.testing.assert_allclose(stats.compute, _cell_sums_by_rows(trace, compute), rtol=1e-12, atol=0)
    np.testing.assert_allclose(stats.optimizer, _cell_sums_by_rows(trace, optimizer), rtol=1e-12, atol=0)


def test_cell_sums_fall_back_off_the_dense_layout() -> None:
    # an interleaved job's P2P rendezvous (its cells hold the pairs' own times) and steps other
    # than the layout's: no dense sums
    trace = _job(interleaved=True, shuffle=False)
    steps = np.unique(trace.ops.step).astype(np.int64)
    fwd = (FWD_CODE,)
    assert whatif.build_engine(trace).cell_sums(fwd, steps) is None
    trace = _job(interleaved=False, shuffle=False)
    engine = whatif.build_engine(trace)
    assert engine.cell_sums(fwd, steps + 1) is None
    assert engine.cell_sums(fwd, steps) is not None
