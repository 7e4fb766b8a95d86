"""The slow-communication detector's batched-P2P calls against the plain grouping by ``np.lexsort``."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from diagnosers.detectors.slow_communication import _in_cell_blocks, batch_ids


def _sorted_ids(cell: np.ndarray, start: np.ndarray, is_p2p: np.ndarray) -> np.ndarray:
    """The plain ids: the P2P rows sorted by (cell, start), runs of equal keys numbered in turn."""
    out = np.full(len(cell), -1, dtype=np.int64)
    idx = np.flatnonzero(is_p2p)
    order = np.lexsort((start[idx], cell[idx]))
    c, t = cell[idx][order], start[idx][order]
    new = np.r_[True, (c[1:] != c[:-1]) | (t[1:] != t[:-1])] if len(c) else np.zeros(0, dtype=bool)
    out[idx[order]] = np.cumsum(new) - 1
    return out


def _same_calls(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two id arrays group the rows alike (-1 on the same rows, one-to-one ids)."""
    if not np.array_equal(a < 0, b < 0):
        return False
    on = a >= 0
    pairs = np.unique(np.stack([a[on], b[on]]), axis=1)
    return pairs.shape[1] == len(np.unique(a[on])) == len(np.unique(b[on]))


def _stats(cell: np.ndarray, start: np.ndarray) -> Any:
    return SimpleNamespace(n_ops=len(cell), op_cell=cell, op_start=start)


@pytest.mark.parametrize("seed", range(40))
def test_batch_ids_are_the_sorted_grouping(seed: int) -> None:
    rng = np.random.default_rng(seed)
    blocks = int(rng.integers(1, 30))
    cells = rng.permutation(200)[:blocks]
    lengths = rng.integers(1, 8, blocks)
    cell = np.repeat(cells, lengths).astype(np.int64)
    # time-ordered blocks with ties (the stored-order path); every third seed a random order, every
    # fourth cells scattered (the sort)
    start = np.concatenate([np.sort(rng.integers(0, 5, n)) for n in lengths]).astype(np.float64)
    if seed % 3 == 0:
        rng.shuffle(start)
    if seed % 4 == 0:
        rng.shuffle(cell)
    is_p2p = rng.random(len(cell)) < 0.7
    got = batch_ids(_stats(cell, start), is_p2p)  # type: ignore[arg-type]
    want = _sorted_ids(cell, start, is_p2p)
    assert _same_calls(got, want)
    idx = np.flatnonzero(is_p2p)
    blocked = _in_cell_blocks(cell[idx], start[idx])
    if seed % 3 and seed % 4:
        assert blocked  # stored in time-ordered blocks: the stored-order path is the one tested
    if not blocked:
        assert np.array_equal(got, want)  # the sort, numbered as the plain grouping numbers
    if _in_cell_blocks(cell, start):  # every row stored so: the runs of all the rows numbered
        assert np.array_equal(got[is_p2p], _all_runs(cell, start)[is_p2p])


def _all_runs(cell: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Every row's run of equal (cell, start) neighbours, numbered from 0."""
    return np.cumsum(np.r_[True, (cell[1:] != cell[:-1]) | (start[1:] != start[:-1])]) - 1


@pytest.mark.parametrize("seed", range(20))
def test_batch_ids_with_other_rows_out_of_order(seed: int) -> None:
    # P2P rows in time-ordered cell blocks, the other rows of a block out of time order: not the
    # all-rows path (its runs would split a call), the P2P rows' own; the same calls either way
    rng = np.random.default_rng(100 + seed)
    blocks = int(rng.integers(2, 20))
    lengths = rng.integers(3, 10, blocks)
    cell = np.repeat(rng.permutation(100)[:blocks], lengths).astype(np.int64)
    start = np.concatenate([np.sort(rng.integers(0, 4, n)) for n in lengths]).astype(np.float64)
    is_p2p = rng.random(len(cell)) < 0.6
    is_p2p[0], is_p2p[1] = False, True
    start[0] = start[: lengths[0]].max() + 1.0  # a non-P2P row late in its block, stored first
    assert not _in_cell_blocks(cell, start)
    got = batch_ids(_stats(cell, start), is_p2p)  # type: ignore[arg-type]
    assert _same_calls(got, _sorted_ids(cell, start, is_p2p))


def test_in_cell_blocks() -> None:
    cell = np.array([3, 3, 1, 1, 1, 2], dtype=np.int64)
    start = np.array([0.0, 1.0, 0.0, 0.0, 2.0, 5.0])
    assert _in_cell_blocks(cell, start)
    assert not _in_cell_blocks(cell, start[[1, 0, 2, 3, 4, 5]])  # a block out of time order
    assert not _in_cell_blocks(cell[[0, 2, 1, 3, 4, 5]], start)  # cell 3 in two runs
    assert _in_cell_blocks(np.zeros(0, dtype=np.int64), np.zeros(0))


def test_empty() -> None:
    empty = np.zeros(0)
    stats = _stats(empty.astype(np.int64), empty)
    assert batch_ids(stats, np.zeros(0, dtype=bool)).size == 0  # type: ignore[arg-type]
