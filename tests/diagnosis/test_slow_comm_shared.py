"""The slow-communication detector's shared per-detection work against the plain computations:
type baselines over communication rows only, P2P links passed in, and one batch of what-if runs
for all communication, all compute and every candidate."""

from __future__ import annotations

import numpy as np
import pytest

from diagnosers import whatif
from diagnosers.detectors import compute_stats
from diagnosers.detectors.base import Probe, TraceStats
from diagnosers.detectors.slow_communication import (
    BR,
    BS,
    FR,
    FS,
    _member,
    both_views,
    candidates,
    comm_mask,
    p2p_links,
    p2p_rows,
    stands_out,
    type_baseline,
)
from diagnosers.synth import ScenarioSpec, generate
from diagnosers.synth.spec import Schedule


def _stats(schedule: Schedule, vpp: int) -> TraceStats:
    spec = ScenarioSpec(
        dp=4, pp=4, vpp=vpp, microbatches=8, steps=3, seed=11, schedule=schedule,
        scenarios=["slow-communication"],
    )
    trace = generate(spec).trace
    return compute_stats(trace, whatif.build_engine(trace))


CASES = [(Schedule.ONE_F_ONE_B, 1), (Schedule.INTERLEAVED, 2)]


@pytest.mark.parametrize(("schedule", "vpp"), CASES)
def test_baselines_links_and_candidates_match_the_plain_computation(schedule: Schedule, vpp: int) -> None:
    stats = _stats(schedule, vpp)
    assert stats.probe is not None
    transfer = stats.probe.original
    is_comm = comm_mask(stats)
    # the lower quartile of each communication type over all its rows
    want = np.zeros_like(transfer)
    for code in np.unique(stats.optype[is_comm]):
        m = stats.optype == code
        want[m] = np.percentile(transfer[m], 25)
    base = type_baseline(stats, transfer, is_comm)
    assert np.array_equal(base, want)
    # the links by np.isin
    o, d, p = stats.optype, stats.op_dp.astype(np.int64), stats.op_pp.astype(np.int64)
    is_p2p = np.isin(o, np.array([FS, FR, BS, BR], dtype=np.int16))
    link_stage = np.where((o == FS) | (o == BR), p, p - 1)
    link = np.where(is_p2p & (link_stage >= 0) & (link_stage < stats.pp - 1), d * stats.pp + link_stage, -1)
    links = p2p_links(stats)
    assert np.array_equal(links[0], is_p2p) and np.array_equal(links[1], link)
    # candidates and stands_out with the shared links equal the ones computing their own
    plain = candidates(stats, transfer)
    shared = candidates(stats, transfer, base=base, links=links)
    assert [(n, c) for n, c, _ in plain] == [(n, c) for n, c, _ in shared]
    assert all(np.array_equal(a, b) for (_, _, a), (_, _, b) in zip(plain, shared, strict=True))
    assert stands_out(stats, transfer, plain) == stands_out(stats, transfer, shared, base=base, links=links)


@pytest.mark.parametrize(("schedule", "vpp"), CASES)
def test_p2p_row_views_match_the_sums_over_every_op(schedule: Schedule, vpp: int) -> None:
    """The P2P rows' gathered views give, to the bit, the sums the detector made over every op
    with the other rows masked out (excess zero off communication rows, ratios over all ops)."""
    stats = _stats(schedule, vpp)
    assert stats.probe is not None
    transfer = stats.probe.original
    is_comm = comm_mask(stats)
    base = type_baseline(stats, transfer, is_comm)
    is_p2p, link = p2p_links(stats)
    view = p2p_rows(stats, transfer, base, (is_p2p, link))
    n = stats.dp * stats.pp
    excess = np.where(is_comm, np.clip(transfer - base, 0.0, None), 0.0)
    ratio = transfer / np.maximum(base, 1e-12)
    ok = link >= 0
    on_link = view.link >= 0
    assert np.array_equal(view.rows, np.flatnonzero(is_p2p))
    assert np.array_equal(view.link_excess_sum, np.bincount(link[ok], weights=excess[ok], minlength=n))
    assert np.array_equal(view.link_n, np.bincount(link[ok], minlength=n))
    assert np.array_equal(view.link_ratio_sum, np.bincount(link[ok], weights=ratio[ok], minlength=n))
    assert np.array_equal(
        np.bincount(view.link[on_link], weights=view.ratio[on_link], minlength=n),
        np.bincount(link[ok], weights=ratio[ok], minlength=n),
    )
    worker = stats.op_worker
    plain_excess = np.bincount(worker[is_p2p], weights=excess[is_p2p], minlength=n)
    assert np.array_equal(view.worker_excess_sum, plain_excess)
    plain_sum = np.bincount(worker[is_p2p], weights=ratio[is_p2p], minlength=n)
    assert np.array_equal(view.worker_ratio_sum, plain_sum)
    assert np.array_equal(view.worker_n, np.bincount(worker[is_p2p], minlength=n))
    # and the plain per-worker mean, summed one row at a time
    mean = np.ones(n)
    for w in np.unique(worker[is_p2p]):
        mean[w] = np.mean(ratio[is_p2p & (worker == w)])
    got = np.divide(view.worker_ratio_sum, view.worker_n, out=np.ones(n), where=view.worker_n > 0)
    assert np.allclose(got, mean, rtol=1e-12, atol=0.0)


@pytest.mark.parametrize(("schedule", "vpp"), CASES)
@pytest.mark.parametrize("batched", [False, True])
def test_one_batch_of_runs_matches_separate_batches(schedule: Schedule, vpp: int, batched: bool) -> None:
    stats = _stats(schedule, vpp)
    assert stats.probe is not None
    is_comm = comm_mask(stats)
    masks = [m for _, _, m in candidates(stats, stats.probe.original)]
    assert masks
    engine = stats.probe.engine
    # fresh probes: no scenario memo shared between the two ways
    apart = both_views(Probe(engine), [is_comm, ~is_comm], batched)
    apart += both_views(Probe(engine), masks, batched)
    together = both_views(Probe(engine), [is_comm, ~is_comm, *masks], batched)
    assert together == apart


@pytest.mark.parametrize("seed", range(12))
def test_member_matches_isin(seed: int) -> None:
    rng = np.random.default_rng(seed)
    low = -1 if seed % 3 else -4  # ids below -1 take the clipped lookup
    ids = rng.integers(low, 1 + seed * 7, int(rng.integers(0, 300))).astype(np.int64)
    wanted = np.unique(rng.integers(0, 2 + seed * 9, int(rng.integers(0, 6)))).astype(np.int64)
    assert np.array_equal(_member(ids, wanted), (ids >= 0) & np.isin(ids, wanted))
    assert not _member(np.full(4, -1, dtype=np.int64), np.zeros(0, dtype=np.int64)).any()


@pytest.mark.parametrize(("schedule", "vpp"), CASES)
def test_the_remedy_reuses_the_detectors_candidates(
    schedule: Schedule, vpp: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The slow-communication remedy looks its group up in the candidates the detector made (one
    computation per diagnosis), and predicts what it predicts from candidates of its own."""
    from diagnosers.detectors import slow_communication
    from diagnosers.remedies import comm_remedy

    stats = _stats(schedule, vpp)
    assert stats.probe is not None
    made: list[int] = []
    real = slow_communication.candidate_groups  # the ranking the candidates are made from

    def counted(*args: object, **kwargs: object) -> object:
        made.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(slow_communication, "candidate_groups", counted)
    engine = stats.probe.engine
    assert isinstance(engine, whatif.WhatIfEngine)
    report = whatif.analyze(engine.trace, engine=engine)
    match = slow_communication.detect(report, stats)
    assert match is not None and match.id.value == "slow-communication"
    shared = comm_remedy(match, stats, stats.probe)
    assert len(made) == 1
    own = comm_remedy(match, stats, Probe(engine))  # another probe: candidates of its own
    assert len(made) == 2
    assert own == shared



@pytest.mark.parametrize(("schedule", "vpp"), CASES)
def test_type_baselines_looked_up_where_read_are_the_full_length_ones(schedule: Schedule, vpp: int) -> None:
    """``PerType`` (the detector's baselines) gives, at any rows or mask, what the full-length
    ``type_baseline`` holds there; the P2P view, the candidates and the transient test read the
    same values either way."""
    from diagnosers.detectors.slow_communication import PerType, transient, type_baseline_table

    stats = _stats(schedule, vpp)
    assert stats.probe is not None
    transfer, is_comm = stats.probe.original, comm_mask(stats)
    full = type_baseline(stats, transfer, is_comm)
    looked_up = PerType(type_baseline_table(stats, transfer, is_comm), stats.optype)
    rows = np.flatnonzero(is_comm)
    assert np.array_equal(looked_up[rows], full[rows]) and np.array_equal(looked_up[is_comm], full[is_comm])
    assert np.array_equal(looked_up[np.arange(len(full))], full)
    links = p2p_links(stats)
    a, b = p2p_rows(stats, transfer, full, links), p2p_rows(stats, transfer, looked_up, links)
    # (the looked-up baselines' sums are read off the dense layout: the same terms in another order)
    sums = [f for f in a.__dataclass_fields__ if f.endswith(("_sum", "_n"))]
    assert all(np.allclose(getattr(a, f), getattr(b, f), rtol=1e-12, atol=0) for f in sums)
    assert all(np.array_equal(getattr(a, f), getattr(b, f)) for f in ("rows", "link", "ratio"))
    plain = candidates(stats, transfer, base=full)
    kept = candidates(stats, transfer, base=looked_up)
    assert [(n, c) for n, c, _ in plain] == [(n, c) for n, c, _ in kept]
    assert transient(stats, transfer, full, plain) == transient(stats, transfer, looked_up, plain)


@pytest.mark.parametrize(("schedule", "vpp"), CASES)
def test_group_means_made_once_are_each_calls_own(schedule: Schedule, vpp: int) -> None:
    """``group_stands_out`` over the probe's transfer times (the groups' means shared) says what it
    says over a copy of them (the means made by the call), for every stage's DP group, with one
    stage's DP collectives made slow so that the test can say yes."""
    from diagnosers.detectors.slow_communication import DP_CODES, group_stands_out

    stats = _stats(schedule, vpp)
    assert stats.probe is not None
    transfer = stats.probe.original
    slow = transfer.copy()
    slow[stats.of_types(DP_CODES.tolist()) & (stats.op_pp == 1)] *= 5.0
    names = [(f"dp group of stage {s}", [(d, s) for d in range(stats.dp)]) for s in range(stats.pp)]
    names.append(("embedding group of dp 0", [(0, 0), (0, stats.pp - 1)]))
    said = [group_stands_out(stats, transfer, n, c) for n, c in names]
    assert said == [group_stands_out(stats, transfer.copy(), n, c) for n, c in names]
    assert [group_stands_out(stats, slow, n, c) for n, c in names][1]  # (a copy: its own means)
