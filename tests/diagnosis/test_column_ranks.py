"""The coherence test's column ranks against the plain double ``argsort``."""

from __future__ import annotations

import numpy as np
import pytest

from diagnosers.detectors.sequence_length import _column_ranks


@pytest.mark.parametrize(("rows", "cols"), [(1, 1), (2, 3), (50, 4), (1000, 16)])
def test_column_ranks_match_a_double_argsort(rows: int, cols: int) -> None:
    m = np.round(np.random.default_rng(rows).normal(size=(rows, cols)), 1)  # many ties
    want = np.argsort(np.argsort(m, axis=0), axis=0).astype(np.float64)
    assert np.array_equal(_column_ranks(m), want)
