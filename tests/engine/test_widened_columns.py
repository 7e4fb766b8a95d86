"""Parquet columns stored narrower than the op table's types are widened in one copy per column
(``artifact._widened``), row group by row group: the values are those of ``to_numpy`` followed by
``astype``; other columns (already of the table's type, wider, with nulls) take the general path."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from diagnosers.model import COLUMNS
from diagnosers.readers.artifact import _widened, columns_from_table


def chunked(values: np.ndarray, typ: pa.DataType, parts: int) -> pa.ChunkedArray:
    return pa.chunked_array([pa.array(p, type=typ) for p in np.array_split(values, parts)], type=typ)


def test_widened_equals_to_numpy_then_astype() -> None:
    rng = np.random.default_rng(3)
    n = 10_001
    cases = [
        ("dp_rank", pa.int16(), rng.integers(0, 300, n)),
        ("stage", pa.int8(), rng.integers(0, 16, n)),
        ("rank", pa.int32(), rng.integers(0, 5000, n)),
        ("step", pa.int16(), rng.integers(-3, 30, n)),
        ("start_ts", pa.float32(), rng.random(n) * 50),
        ("duration", pa.float16(), rng.random(n)),
        ("mc", pa.uint8(), rng.integers(0, 4, n)),
    ]
    for name, typ, values in cases:
        for parts in (1, 2, 7):
            col = chunked(values, typ, parts)
            got = _widened(col, COLUMNS[name])
            assert got is not None and got.dtype == np.dtype(COLUMNS[name]), (name, parts)
            want = col.to_numpy().astype(COLUMNS[name])
            assert np.array_equal(got, want), (name, parts)


def test_general_path_kept_where_widening_would_not_be_exact() -> None:
    n = 100
    same = chunked(np.arange(n), pa.int32(), 3)  # already int32: shared, not copied
    assert _widened(same, COLUMNS["seq_id"]) is None
    wider = chunked(np.arange(n), pa.int64(), 2)  # int64 dp_rank: range-checked by normalize
    assert _widened(wider, COLUMNS["dp_rank"]) is None
    floats = chunked(np.arange(n, dtype=float), pa.float64(), 2)  # a float stage: checked as integers
    assert _widened(floats, COLUMNS["stage"]) is None
    nulls = pa.chunked_array([pa.array([1, None, 3], type=pa.int8())])
    assert _widened(nulls, COLUMNS["mc"]) is None


def test_columns_from_a_multi_chunk_table() -> None:
    rng = np.random.default_rng(4)
    n = 999
    data = {
        "dp_rank": chunked(rng.integers(0, 4, n), pa.int8(), 3),
        "stage": chunked(rng.integers(0, 2, n), pa.int8(), 3),
        "rank": chunked(rng.integers(0, 8, n), pa.int16(), 3),
        "step": chunked(rng.integers(0, 3, n), pa.int64(), 3),
        "optype": pa.chunked_array([pa.array(["forward-compute"] * n).dictionary_encode()]),
        "start_ts": chunked(rng.random(n), pa.float32(), 3),
        "duration": chunked(rng.random(n), pa.float64(), 3),
        "mc": pa.chunked_array([pa.array([1] * (n - 1) + [None], type=pa.int8())]),
    }
    cols, names = columns_from_table(pa.table(data), "mem")
    assert names == ["forward-compute"]
    for c in ("dp_rank", "stage", "rank", "step", "start_ts", "duration"):
        assert np.array_equal(cols[c], data[c].to_numpy().astype(COLUMNS[c])), c
    assert cols["dp_rank"].dtype == np.int32 and cols["start_ts"].dtype == np.float64
    assert cols["mc"][-1] == -1 and (cols["mc"][:-1] == 1).all()  # nulls still become -1
