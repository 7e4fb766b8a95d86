"""``whatif.median`` (the ideal duration of communication types) is ``np.median``, bit for bit."""

from __future__ import annotations

import numpy as np

from diagnosers.whatif import median


def test_median_is_numpys() -> None:
    rng = np.random.default_rng(9)
    for n in (1, 2, 3, 4, 7, 10, 101, 1000):
        for x in (rng.random(n), rng.integers(0, 5, n).astype(float), np.round(rng.normal(size=n), 2)):
            assert median(x) == float(np.median(x))
    with_nan = rng.random(9)
    with_nan[4] = np.nan
    assert np.isnan(median(with_nan)) and np.isnan(np.median(with_nan))
