"""The reader's fast path: (step, rank)-ordered rows keep their order, checked against the sort."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from diagnosers.model import COLUMNS, TraceError
from diagnosers.readers.artifact import columns_from_table, table_from_stream
from diagnosers.readers.normalize import meta_from_data, normalize
from diagnosers.samples import artifact_trace


def _raw(name: str) -> tuple[dict[str, np.ndarray], list[str]]:
    path = artifact_trace(name)
    with open(path, "rb") as fh:
        return columns_from_table(table_from_stream(fh, "parquet", str(path)), str(path))  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["ST", "SE"])
def test_step_rank_ordered_rows_keep_their_order(name: str) -> None:
    cols, cats = _raw(name)
    meta = meta_from_data(cols)
    fast = normalize(cols, meta, source=name, optype_categories=cats).ops
    # the stored rows, as the file holds them (the samples are in (step, rank) order)
    for c in ("start_ts", "duration"):
        assert np.array_equal(fast.__dict__[c], cols[c].astype(np.float64))
    # the oracle: the same rows shuffled go through the sort; sorted alike, both are identical
    perm = np.random.default_rng(3).permutation(len(cols["step"]))
    slow = normalize({c: a[perm] for c, a in cols.items()}, meta, source=name, optype_categories=cats).ops

    def canon(o):  # type: ignore[no-untyped-def]
        return o.take(np.lexsort((o.seq_id, o.optype, o.stage, o.dp_rank, o.step)))

    a, b = canon(fast), canon(slow)
    for c in COLUMNS:
        assert np.array_equal(getattr(a, c), getattr(b, c)), c
        assert getattr(fast, c).dtype == np.dtype(COLUMNS[c])


def test_duplicate_seq_id_in_ordered_rows_is_named(tmp_path: Path) -> None:
    cols, cats = _raw("ST")
    cols["seq_id"] = cols["seq_id"].copy()
    fwd = cats.index("forward-compute")
    i = int(np.flatnonzero(cols["optype"] == fwd)[1])
    cols["seq_id"][i] = cols["seq_id"][i - 1]  # two forwards of one block share a seq_id
    with pytest.raises(TraceError, match="duplicate seq_id"):
        normalize(cols, meta_from_data(cols), source="ST", optype_categories=cats)
