"""The coherence test's column ranks against the plain double ``argsort``, and their correlations
in the column-major layout against the row-major one they were first computed in."""

from __future__ import annotations

import numpy as np
import pytest

from diagnosers.detectors.sequence_length import _column_ranks


@pytest.mark.parametrize(("rows", "cols"), [(1, 1), (2, 3), (50, 4), (1000, 16)])
def test_column_ranks_match_a_double_argsort(rows: int, cols: int) -> None:
    m = np.round(np.random.default_rng(rows).normal(size=(rows, cols)), 1)  # many ties
    want = np.argsort(np.argsort(m, axis=0), axis=0).astype(np.float64)
    assert np.array_equal(_column_ranks(np.ascontiguousarray(m.T)), want.T)


@pytest.mark.parametrize(("rows", "cols"), [(8, 2), (999, 5), (40_960, 16)])
def test_rank_correlations_do_not_depend_on_the_layout(rows: int, cols: int) -> None:
    # ranks are permutations: every product sum is exact, so the column-major matrix gives the
    # correlations of the row-major one bit for bit
    rng = np.random.default_rng(cols)
    m = np.round(rng.normal(size=(rows, cols)) + rng.normal(size=(rows, 1)), 2)
    ranks = _column_ranks(np.ascontiguousarray(m.T))
    row_major = np.argsort(np.argsort(m, axis=0), axis=0).astype(np.float64)
    assert np.array_equal(np.corrcoef(ranks), np.corrcoef(row_major.T))
    assert np.array_equal(np.corrcoef(ranks), np.corrcoef(np.ascontiguousarray(ranks.T).T))


def _two_point_median(a: np.ndarray, axis: int) -> np.ndarray:
    """The plain median: a partition at both middle points, their mean."""
    size = a.shape[axis]
    lo, hi = (size - 1) // 2, size // 2
    mid = np.partition(np.moveaxis(a, axis, -1), sorted({lo, hi}), axis=-1)
    return np.expand_dims((mid[..., lo] + mid[..., hi]) / 2, axis)


@pytest.mark.parametrize("shape", [(3, 1, 4), (5, 2, 7), (4, 32, 16), (6, 128, 3)])
@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("nans", [False, True])
def test_median_along_matches_two_partition_points(shape: tuple[int, ...], axis: int, nans: bool) -> None:
    from diagnosers.detectors.sequence_length import _median_along

    rng = np.random.default_rng(sum(shape) + axis)
    a = np.round(rng.normal(size=shape), 1)  # many ties, zeros of both signs among them
    a[rng.random(shape) < 0.1] = -0.0
    if nans:
        a[rng.random(shape) < 0.2] = np.nan
    before = a.copy()
    assert np.array_equal(_median_along(a, axis), _two_point_median(a, axis), equal_nan=True)
    assert np.array_equal(a, before, equal_nan=True)  # the input is left as it was
