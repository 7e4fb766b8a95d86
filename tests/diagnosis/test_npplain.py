"""``npplain.median`` is ``np.median`` bit for bit (values, dtype, scalar or array, NaNs, empty
inputs and their warnings), ``npplain.percentile`` is ``np.percentile``, ``npplain.unique`` is
``np.unique``, and the diagnosis of a sample never imports ``numpy.ma``."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from diagnosers.npplain import median, percentile, unique
from diagnosers.samples import artifact_trace

ROOT = Path(__file__).resolve().parents[2]


def _same(got: Any, want: Any) -> None:
    assert type(got) is type(want)
    g, w = np.asarray(got), np.asarray(want)
    assert g.dtype == w.dtype and g.shape == w.shape
    assert np.array_equal(g, w, equal_nan=True)
    assert g.tobytes() == w.tobytes() or np.isnan(w).any()


def _cases() -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    out: list[np.ndarray] = []
    for shape in [(1,), (2,), (7,), (8,), (3, 4), (4, 5), (2, 3, 4), (5, 1, 6), (1, 1)]:
        x = rng.lognormal(size=shape)
        out.append(x)
        out.append(np.round(x, 1))  # ties
        with_nan = x.copy()
        with_nan.flat[rng.integers(x.size)] = np.nan
        out.append(with_nan)
        out.append(rng.integers(0, 9, size=shape))
        out.append(x.astype(np.float32))
    return out


@pytest.mark.parametrize("x", _cases(), ids=lambda x: f"{x.dtype}{x.shape}")
def test_median_is_numpys(x: np.ndarray) -> None:
    for axis in [None, *range(x.ndim), -1]:
        for keepdims in (False, True):
            _same(median(x, axis=axis, keepdims=keepdims), np.median(x, axis=axis, keepdims=keepdims))


def test_median_of_lists_and_empty_arrays() -> None:
    _same(median([3.0, 1.0, 2.0]), np.median([3.0, 1.0, 2.0]))
    for x, axis in [(np.array([]), None), (np.zeros((0, 3)), 0), (np.zeros((3, 0)), 0)]:
        with warnings.catch_warnings(record=True) as got_w:
            warnings.simplefilter("always")
            got = median(x, axis=axis)
        with warnings.catch_warnings(record=True) as want_w:
            warnings.simplefilter("always")
            want = np.median(x, axis=axis)
        _same(got, want)
        assert [str(w.message) for w in got_w] == [str(w.message) for w in want_w]
    with pytest.raises(np.exceptions.AxisError):
        median(np.ones(3), axis=1)


@pytest.mark.parametrize("q", [0, 25, 50, 75, 100, 33.3, 99.9, 0.1])
def test_percentile_is_numpys(q: float) -> None:
    rng = np.random.default_rng(11)
    for n in [1, 2, 3, 4, 5, 8, 13, 100, 1001]:
        for x in (rng.lognormal(size=n), np.round(rng.lognormal(size=n), 1), rng.lognormal(size=n) * 1e-5):
            _same(percentile(x, q), np.percentile(x, q))
            _same(percentile(x.astype(np.float32), q), np.percentile(x.astype(np.float32), q))
            if n > 1:
                x = x.copy()
                x[n // 2] = np.nan
                _same(percentile(x, q), np.percentile(x, q))
        ints = rng.integers(0, 9, size=n)  # ties, and no NaN check
        _same(percentile(ints, q), np.percentile(ints, q))


@pytest.mark.parametrize(
    "x",
    [
        np.array([3, 1, 3, 2, 1, 7]),
        np.array([], dtype=np.int64),
        np.array([[4, 4], [1, 9]], dtype=np.int16),
        np.array([2.5, np.nan, 1.0, np.nan, 2.5, -0.0, 0.0]),
        np.array([0.0, -0.0]),
        np.random.default_rng(1).integers(0, 50, size=10_000),
        [5, 3, 5],
    ],
    ids=str,
)
def test_unique_is_numpys(x: Any) -> None:
    _same(unique(x), np.unique(x))


def test_diagnosis_does_not_import_numpy_ma() -> None:
    code = (
        "import io, sys, contextlib; from server.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    main(['diagnose', {str(artifact_trace('AR'))!r}, '--no-similar', '--json'])\n"
        "print('MA', 'numpy.ma' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    # a diagnosis module calling np.median, np.percentile or np.unique (values only) imports
    # numpy.ma again: call diagnosers.npplain's instead
    assert out.stdout.splitlines()[-1] == "MA False", "numpy.ma imported: see diagnosers/npplain.py"
