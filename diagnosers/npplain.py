"""``np.median``, ``np.percentile`` and ``np.unique`` without importing ``numpy.ma``.

numpy's median of a float array ends with a NaN check that asks ``np.ma.isMaskedArray``, its
``unique`` (values only, which its percentile calls too) asks ``np.ma.is_masked``: either imports
``numpy.ma`` on first use, 40-60 ms
of CPU on this project's 2-core build machine, a quarter of what the whole diagnosis of one of the
study's ~100k-op samples adds to its analysis. The diagnosis calls these instead; their results are
numpy's bit for bit (``tests/diagnosis/test_npplain.py`` compares them).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.lib.array_utils import normalize_axis_index


def unique(values: Any) -> Any:
    """``np.unique(values)``: the sorted distinct values (NaNs as one). numpy's sorting path, the one
    it takes when counts are asked for, which skips the masked-array check."""
    return np.unique(values, return_counts=True)[0]


def percentile(a: Any, q: float) -> Any:
    """``np.percentile(a, q)`` over all of ``a`` (method ``linear``, ``q`` a Python number), as
    numpy 2.x's ``_quantile`` computes it: the order statistics around the virtual index
    ``(n - 1) q / 100`` by a partition, their interpolation ``lo + (hi - lo) g`` below
    ``g = 0.5`` and ``hi - (hi - lo)(1 - g)`` from it, NaN when any value is NaN."""
    x = np.asarray(a).ravel()
    n = x.shape[0]
    virtual = (n - 1) * np.true_divide(q, 100)
    if np.isnan(virtual) or virtual >= n - 1:
        below = above = -1
    elif virtual < 0:
        below = above = 0
    else:
        below = math.floor(virtual)
        above = below + 1
    if np.issubdtype(x.dtype, np.inexact) and n and np.isnan(x).any():
        # numpy's NaN (the last value of its partition, where NaNs sort)
        return np.partition(x, sorted({0, -1, below, above}))[-1]
    # Without NaN the two order statistics from one partition point: every value after ``below``
    # is no smaller, so the next order statistic is their minimum (the values numpy's partition
    # at 0, -1, below and above puts there; a fifth of its time)
    part = np.partition(x, below)
    lo = part[below]
    hi = lo if above == below else part[below + 1 :].min()
    gamma = float(virtual - below)
    diff = hi - lo
    return hi - diff * (1 - gamma) if gamma >= 0.5 else lo + diff * gamma


def median(a: Any, axis: int | None = None, keepdims: bool = False) -> Any:
    """``np.median(a, axis=axis, keepdims=keepdims)`` (numpy 2.x's ``_median`` under ``_ureduce``,
    for one axis, without the masked-array case of its NaN check): a numpy scalar for ``axis=None``, else an
    array; NaN where a reduced slice holds a NaN, as numpy gives it."""
    x = np.asarray(a)
    nd = x.ndim
    ax = None if axis is None else normalize_axis_index(axis, nd)
    out = _median(x, ax)
    if not keepdims:
        return out
    if ax is None:
        return out[(np.newaxis,) * nd]
    return out[tuple(np.newaxis if i == ax else slice(None) for i in range(nd))]


def _median(a: np.ndarray, axis: int | None) -> Any:
    """numpy's ``_median`` (partition around the middle, mean of the one or two middle values,
    NaN where the partition's last value is NaN)."""
    size = a.size if axis is None else a.shape[axis]
    kth = [size // 2 - 1, size // 2] if size % 2 == 0 else [(size - 1) // 2]
    nans = np.issubdtype(a.dtype, np.inexact) or a.dtype.kind in "Mm"
    if nans:
        kth.append(-1)
    part = np.partition(a, kth, axis=axis)
    if part.shape == ():
        return part.item()
    along = 0 if axis is None else axis
    index = part.shape[along] // 2
    middle = slice(index, index + 1) if part.shape[along] % 2 == 1 else slice(index - 1, index + 1)
    indexer = tuple(middle if i == along else slice(None) for i in range(part.ndim))
    out = np.mean(part[indexer], axis=along)
    if nans and size > 0:
        last = part.take(-1, axis=along)
        isnan = np.isnan(last)
        if isnan.any():
            if isinstance(out, np.generic):
                return last
            np.copyto(out, last, where=isnan)
    return out
