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
