"""``faulty_machine.worker_order_statistic`` (the fast-op factor's lower quantile per worker) is the
sort-based computation it replaced: one lexsort by (worker, duration), then each worker's value at
``floor(fraction * (n - 1))``; on equal and unequal op counts, ties, NaNs and workers without ops."""

from __future__ import annotations

import numpy as np
import pytest

from diagnosers.detectors.faulty_machine import worker_order_statistic


def oracle(worker: np.ndarray, dur: np.ndarray, n_workers: int, fraction: float) -> np.ndarray:
    if not len(worker):
        return np.full(n_workers, np.nan)
    order = np.lexsort((dur, worker))
    n = np.bincount(worker, minlength=n_workers)
    start = np.cumsum(n) - n
    pick = start + np.floor(fraction * np.maximum(n - 1, 0)).astype(np.int64)
    return np.where(n > 0, dur[order][np.minimum(pick, len(worker) - 1)], np.nan)


@pytest.mark.parametrize("fraction", [0.0, 0.1, 0.5, 1.0])
@pytest.mark.parametrize("layout", ["equal", "unequal", "missing", "ties", "nan", "one"])
def test_worker_order_statistic_is_the_sorted_pick(fraction: float, layout: str) -> None:
    rng = np.random.default_rng(4)
    n_workers, per = 12, 37
    worker = np.repeat(np.arange(n_workers), per)
    if layout == "unequal":
        worker = rng.integers(0, n_workers, size=n_workers * per)
    if layout == "missing":
        worker = worker[worker % 5 != 2]  # equal counts, some workers without ops
    if layout == "one":
        worker = np.arange(n_workers)
    rng.shuffle(worker)
    dur = rng.lognormal(size=len(worker))
    if layout == "ties":
        dur = np.round(dur, 1)
    if layout == "nan":
        dur[rng.integers(0, len(dur), size=9)] = np.nan
    got = worker_order_statistic(worker, dur, n_workers, fraction)
    want = oracle(worker, dur, n_workers, fraction)
    assert got.dtype == want.dtype and np.array_equal(got, want, equal_nan=True)


def test_worker_order_statistic_without_ops() -> None:
    got = worker_order_statistic(np.zeros(0, dtype=np.int64), np.zeros(0), 4, 0.1)
    assert got.shape == (4,) and np.isnan(got).all()


def test_fast_op_steps_is_each_step_and_workers_sorted_pick() -> None:
    # fast_op_steps per (step, worker) cell, against a plain loop over the cells: the geometric
    # mean over forward and backward of each cell's FAST_OP_QUANTILE duration, 0 where a cell has
    # no such op (a recording of the example job: every worker traced, unequal op counts per cell)
    from pathlib import Path

    from diagnosers.detectors import compute_stats
    from diagnosers.detectors.faulty_machine import FAST_OP_QUANTILE, fast_op_steps
    from diagnosers.detectors.stats import BWD, FWD
    from diagnosers.readers import load_trace

    folder = Path(__file__).resolve().parents[1] / "data" / "kineto_widened" / "heldout7" / "onset-3x2"
    stats = compute_stats(load_trace([folder / "traces"]))
    got = fast_op_steps(stats)
    want = np.zeros_like(got)
    for s in range(stats.n_steps):
        for d in range(stats.dp):
            for p in range(stats.pp):
                logs = []
                for code in (FWD, BWD):
                    m = ((stats.optype == code) & (stats.op_step_index == s) & (stats.op_dp == d)
                         & (stats.op_pp == p))
                    dur = np.sort(stats.transfer[m])
                    if dur.size:
                        logs.append(np.log(max(dur[int(np.floor(FAST_OP_QUANTILE * (dur.size - 1)))], 1e-12)))
                if len(logs) == 2 and min(logs) > np.log(1e-12):
                    want[s, d, p] = np.exp(sum(logs) / 2)
    assert np.array_equal(got, want)
