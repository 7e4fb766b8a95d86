"""The batched-P2P order of the slow-communication detector against ``np.lexsort``."""

from __future__ import annotations

import numpy as np
import pytest

from diagnosers.detectors.slow_communication import _by_cell_then_start


@pytest.mark.parametrize("seed", range(40))
def test_block_order_matches_lexsort(seed: int) -> None:
    rng = np.random.default_rng(seed)
    blocks = int(rng.integers(1, 30))
    cells = rng.permutation(200)[:blocks]
    lengths = rng.integers(1, 8, blocks)
    cell = np.repeat(cells, lengths).astype(np.int64)
    # time-ordered blocks with ties (the fast path); every third seed a random order (the sort)
    start = np.concatenate([np.sort(rng.integers(0, 5, n)) for n in lengths]).astype(np.float64)
    if seed % 3 == 0:
        rng.shuffle(start)
    if seed % 4 == 0:
        rng.shuffle(cell)
    assert np.array_equal(_by_cell_then_start(cell, start), np.lexsort((start, cell)))


def test_empty() -> None:
    empty = np.zeros(0)
    assert _by_cell_then_start(empty.astype(np.int64), empty).size == 0
