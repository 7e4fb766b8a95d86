"""The detectors' leave-one-out peer medians (``peers.log_ratios``) against the plain loop of one
``np.median`` per worker: equal to the last bit, with excluded cells, ties and odd / even peers."""

from __future__ import annotations

import numpy as np
import pytest

from diagnosers.detectors.peers import log_ratios


def _oracle(values: np.ndarray, exclude: list[tuple[int, int]]) -> np.ndarray:
    _, dp, pp = values.shape
    out = np.full_like(values, np.nan)
    inside = np.zeros((dp, pp), dtype=bool)
    for d, p in exclude:
        inside[d, p] = True
    for p in range(pp):
        for d in range(dp):
            if inside[d, p]:
                continue
            peers = ~inside[:, p]
            peers[d] = False
            if not peers.any():
                continue
            ref = np.median(values[:, peers, p], axis=1)
            out[:, d, p] = np.log(np.maximum(values[:, d, p], 1e-12) / np.maximum(ref, 1e-12))
    return out


@pytest.mark.parametrize("dp", [1, 2, 3, 4, 7, 16])
@pytest.mark.parametrize("ties", [False, True])
def test_log_ratios_match_one_median_per_worker(dp: int, ties: bool) -> None:
    rng = np.random.default_rng(dp)
    values = rng.lognormal(0.0, 0.2, size=(5, dp, 3))
    if ties:
        values = np.round(values, 1)  # many equal values in a stage
    values[0, 0, 0] = 0.0  # the floor of the log
    for exclude in ([], [(0, 1)], [(d, 2) for d in range(dp)], [(dp - 1, 0), (0, 0)]):
        got, want = log_ratios(values, exclude), _oracle(values, exclude)
        assert np.array_equal(got, want, equal_nan=True), exclude


def test_log_ratios_with_nan_match_the_loop() -> None:
    values = np.random.default_rng(1).lognormal(size=(4, 5, 2))
    values[1, 2, 0] = np.nan
    assert np.array_equal(log_ratios(values), _oracle(values, []), equal_nan=True)


@pytest.mark.parametrize("m", [2, 3, 4, 9])
def test_median_of_others_matches_np_delete(m: int) -> None:
    from diagnosers.detectors.peers import median_of_others

    row = np.round(np.random.default_rng(m).lognormal(size=m), 1)
    want = np.array([np.median(np.delete(row, i)) for i in range(m)])
    assert np.array_equal(median_of_others(row[None, :])[0], want)


@pytest.mark.parametrize("blocks", [True, False])
def test_reduce_into_matches_ufunc_at(blocks: bool) -> None:
    """The trace statistics' per-group minimum / maximum by runs equals ``ufunc.at``, with the
    rows in contiguous groups (the reduceat path) or not (the fallback), NaN and empty groups."""
    from diagnosers.readers.normalize import reduce_into

    rng = np.random.default_rng(2)
    index = np.repeat(rng.permutation(40)[:30], rng.integers(1, 6, size=30))
    if not blocks:
        index = rng.permutation(index)
    values = rng.normal(size=len(index))
    values[5] = np.nan
    for ufunc, fill in ((np.minimum, np.inf), (np.maximum, -np.inf)):
        want = np.full(45, fill)
        with np.errstate(invalid="ignore"):  # NaN propagates through both
            ufunc.at(want, index, values)
            got = reduce_into(ufunc, index, values, 45, fill)
        assert np.array_equal(got, want, equal_nan=True)
    assert np.array_equal(reduce_into(np.minimum, index[:0], values[:0], 3, np.inf), np.full(3, np.inf))


def test_type_and_worker_masks_match_isin() -> None:
    """``TraceStats.of_types`` and ``worker_mask`` (lookup tables) against ``np.isin`` and the 2-D
    index they replace, on a sample's statistics."""
    from diagnosers.detectors import compute_stats
    from diagnosers.readers import ReadOptions, load_trace
    from diagnosers.samples import artifact_trace

    stats = compute_stats(load_trace([artifact_trace("SE")], ReadOptions()))
    for codes in ([0], [1, 2, 3], [], list(range(30))):
        assert np.array_equal(stats.of_types(codes), np.isin(stats.optype, codes))
    cells = [(0, 0), (1, stats.pp - 1), (stats.dp - 1, 0)]
    sel = np.zeros((stats.dp, stats.pp), dtype=bool)
    for d, p in cells:
        sel[d, p] = True
    for _ in range(2):  # the second call uses the cached worker index
        assert np.array_equal(stats.worker_mask(cells), sel[stats.op_dp, stats.op_pp])


def test_probe_reuses_masked_runs_with_the_same_numbers() -> None:
    """A masked scenario asked for again (a remedy repeating a detector's run) is answered from
    the probe's memo, and equals a fresh run of it alone and a run in another batch."""
    from diagnosers.detectors.base import Probe
    from diagnosers.readers import ReadOptions, load_trace
    from diagnosers.samples import artifact_trace
    from diagnosers.whatif import build_engine

    trace = load_trace([artifact_trace("AR")], ReadOptions())
    engine = build_engine(trace)
    rng = np.random.default_rng(4)
    masks = [rng.random(len(trace.ops)) < q for q in (0.1, 0.3)]
    probe = Probe(engine)
    both = probe.masked_means(masks)
    again = probe.masked_means([masks[1], masks[0].copy(), masks[1]])
    assert len(probe._masked) == 2
    assert np.array_equal(again, both[[1, 0, 1]])
    for m, want in zip(masks, both, strict=True):
        alone = np.asarray(engine.simulate_masked([m])).mean(axis=1)[0]
        assert alone == want
    reverse = probe.masked_means(masks, ideal_inside=False)  # the other direction is its own run
    assert len(probe._masked) == 4
    assert np.array_equal(Probe(engine).masked_means(masks, ideal_inside=False), reverse)
    # every cell of the sample holds an op: "mask original, rest ideal" is "complement ideal"
    assert engine.fills_every_cell
    complement = Probe(engine).masked_means([~m for m in masks])
    assert np.array_equal(complement, reverse)
    assert np.array_equal(probe.masked_means([~m for m in masks]), reverse) and len(probe._masked) == 4


@pytest.mark.parametrize("dp", [2, 3, 4, 7, 128])
def test_leave_one_out_ratios_match_the_median_of_each_rank_left_out(dp: int) -> None:
    from diagnosers.detectors.faulty_machine import leave_one_out_ratios
    from diagnosers.npplain import median

    rng = np.random.default_rng(dp)
    values = rng.random((6, dp, 5)) + 0.5
    values[0, :, 0] = 1.25  # ties: a whole stage alike
    values[1, : max(1, dp // 2), 1] = 0.75
    with_nan = values.copy()
    with_nan[2, 0, 2] = np.nan  # a worker without the value: the plain medians
    for v in (values, with_nan):
        want = np.empty_like(v)
        for d in range(dp):
            want[:, d, :] = np.log(v[:, d, :] / median(np.delete(v, d, axis=1), axis=1))
        assert np.array_equal(leave_one_out_ratios(v), want, equal_nan=True)
