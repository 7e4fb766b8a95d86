"""``_group_median`` (the detectors' per-group medians) against a per-group ``np.median`` loop."""

from __future__ import annotations

import numpy as np
import pytest

from diagnosers.detectors.stats import _group_median


@pytest.mark.parametrize(("n", "groups"), [(0, 1), (1, 1), (9, 4), (5000, 7), (150_000, 70_000)])
def test_group_median_matches_a_loop(n: int, groups: int) -> None:
    rng = np.random.default_rng(n)
    group = (rng.integers(0, groups, n) * 5 - 3).astype(np.int64)  # sparse, negative ids too
    values = np.round(rng.normal(size=n), 1)  # many ties
    got = _group_median(group, values)
    want = np.empty(n)
    by_group = np.argsort(group, kind="stable")
    cut = np.flatnonzero(np.diff(group[by_group])) + 1
    for rows in np.split(by_group, cut) if n else []:
        want[rows] = np.median(values[rows])
    assert np.array_equal(got, want)


@pytest.mark.parametrize(("groups", "size"), [(1, 1), (1, 6), (4, 7), (300, 8), (70_000, 3)])
def test_equal_groups_match_a_loop(groups: int, size: int) -> None:
    # equal-sized groups take the partition path
    rng = np.random.default_rng(groups * size)
    group = np.repeat(rng.permutation(groups) * 3 - 7, size).astype(np.int64)
    rng.shuffle(group)
    values = np.round(rng.normal(size=len(group)), 1)
    got = _group_median(group, values)
    want = np.empty(len(group))
    for g in np.unique(group):
        rows = group == g
        want[rows] = np.median(values[rows])
    assert np.array_equal(got, want)


@pytest.mark.parametrize(("groups", "size"), [(1, 1), (3, 2), (40, 7), (300, 32), (8, 4096)])
@pytest.mark.parametrize("shuffled", [False, True])
def test_one_partition_point_gives_the_two_point_median(groups: int, size: int, shuffled: bool) -> None:
    # groups as runs of rows (the in-place path) and scattered (the gathered path), each median
    # from one partition point and the maximum below it: the mean of the two middle values a
    # partition at both points gives (np.median's, without NaN); ties and NaN included
    rng = np.random.default_rng(groups + size)
    group = np.repeat(np.arange(groups) * 2 + 1, size).astype(np.int64)
    if shuffled:
        rng.shuffle(group)
    values = np.round(rng.normal(size=len(group)), 1)
    lo, hi = (size - 1) // 2, size // 2
    for nan in (False, True):
        if nan:
            values[rng.random(len(values)) < 0.05] = np.nan
        got = _group_median(group, values)
        want = np.empty(len(group))
        for g in np.unique(group):
            rows = group == g
            mid = np.partition(values[rows], sorted({lo, hi}))
            want[rows] = (mid[lo] + mid[hi]) / 2
            if not nan:
                assert want[rows][0] == np.median(values[rows])
        assert np.array_equal(got, want, equal_nan=True)
