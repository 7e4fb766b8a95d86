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


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint32, np.uint64])
@pytest.mark.parametrize("name", ["step", "seq_id"])
def test_integer_range_check_matches_the_float_oracle(dtype: type, name: str) -> None:
    """The range check of integer columns (only their extremes tested) accepts and refuses exactly
    what the plain test on every value as a float does, at the limits of each column kind."""
    from diagnosers.readers.validate import _INT32, INT32_MAX, check_int_array

    limit = INT32_MAX if name in _INT32 else 2**62
    info = np.iinfo(dtype)
    edges = {0, 1, limit - 1, limit, limit + 1, 2**62 - 1, 2**62 - 600, 2**62 + 1, -limit, -limit + 1}
    for v in sorted(edges):
        if not info.min <= v <= info.max:
            continue
        arr = np.array([3, v, 5], dtype=dtype)
        oracle = bool((np.abs(arr.astype(np.float64)) >= limit).any())
        if oracle:
            with pytest.raises(TraceError, match="too large for its column"):
                check_int_array(name, arr, lambda i: {"file": "t", "rank": 0, "step": 0})
        else:
            check_int_array(name, arr, lambda i: {"file": "t", "rank": 0, "step": 0})


def test_common_keys_match_intersect1d() -> None:
    """The key pairing's lookup table finds the pairs ``np.intersect1d`` finds, in its order
    (unique keys), and repeated or negative keys fall back to it."""
    from diagnosers.readers.validate import common_keys

    rng = np.random.default_rng(5)
    for space in (50, 5_000, 10**9):
        for repeat in (False, True):
            n = min(space, 4_000)
            a = rng.choice(n, size=min(n, 300), replace=repeat).astype(np.int64)
            b = rng.choice(n, size=min(n, 200), replace=repeat).astype(np.int64)
            b[:3] = -b[:3] - 1 if repeat else b[:3]
            want = np.intersect1d(a, b, return_indices=True)
            i_a, i_b = common_keys(a, b, space)
            assert np.array_equal(i_a, want[1]) and np.array_equal(i_b, want[2])
            i_a, i_b = common_keys(a, b, space, ordered=False)
            assert np.array_equal(a[i_a], b[i_b])
            assert sorted(a[i_a].tolist()) == want[0].tolist()


def test_pipeline_without_p2p_is_named() -> None:
    """A pp > 1 trace without any point-to-point op gets the pipeline problem (the op-type check
    counts codes instead of ``np.isin``); the same trace with its P2P ops has none."""
    from diagnosers.model import OPTYPE_CODE, P2P_OPTYPES
    from diagnosers.readers import ReadOptions, load_trace
    from diagnosers.readers.validate import pipeline_problem

    trace = load_trace([artifact_trace("ST")], ReadOptions())
    assert trace.meta.pp > 1 and pipeline_problem(trace) is None
    keep = ~np.isin(trace.ops.optype, [OPTYPE_CODE[n] for n in P2P_OPTYPES])
    trace.ops = trace.ops.take(np.flatnonzero(keep))
    problem = pipeline_problem(trace)
    assert problem is not None and "no point-to-point op" in problem


def test_simulator_shape_test_matches_broadcast_shapes() -> None:
    """The simulator's in-place test (``_holds``) agrees with ``np.broadcast_shapes`` on every
    pair of rank-3 shapes over sizes 1..3, and refuses ranks that differ."""
    import itertools

    from diagnosers.simulate import _holds

    shapes = list(itertools.product((1, 2, 3), repeat=3))
    for a, b in itertools.product(shapes, shapes):
        try:
            want = np.broadcast_shapes(a, b) == a
        except ValueError:
            want = False
        assert _holds(a, b) == want, (a, b)
    assert not _holds((2, 2), (2, 2, 2))


def test_value_checks_from_extremes_match_the_row_tests() -> None:
    """``_values_in_range`` (each column's minimum and maximum) passes exactly the columns that
    the row-by-row tests of ``_check_values`` accept: NaN, infinities, times beyond ``MAX_TIME``,
    negative durations or ranks and ranks outside the job, one bad value at a time."""
    from diagnosers.model import JobMeta
    from diagnosers.readers.normalize import _check_values, _values_in_range
    from diagnosers.readers.validate import MAX_TIME

    meta = JobMeta(dp=4, pp=2)
    rng = np.random.default_rng(11)
    n = 50
    base = {
        "start_ts": rng.uniform(0, 10, n),
        "duration": rng.uniform(0, 1, n),
        "dp_rank": rng.integers(0, 4, n).astype(np.int32),
        "stage": rng.integers(0, 2, n).astype(np.int32),
        "rank": rng.integers(0, 8, n).astype(np.int64),
    }
    bad_values = {
        "start_ts": [np.nan, np.inf, -np.inf, MAX_TIME * 1.01, -MAX_TIME * 1.01, MAX_TIME, -MAX_TIME, -3.0],
        "duration": [np.nan, np.inf, -1e-12, 0.0, MAX_TIME * 2, MAX_TIME],
        "dp_rank": [-1, 3, 4],
        "stage": [-1, 1, 2],
        "rank": [-1, 0, 10**12],
    }
    where = lambda i: {"file": "t", "rank": 0, "step": 0}  # noqa: E731
    for col, values in bad_values.items():
        for v in values:
            cols = {c: a.copy() for c, a in base.items()}
            cols[col][int(rng.integers(n))] = v
            args = (cols["start_ts"], cols["duration"], cols["dp_rank"], cols["stage"], cols["rank"])
            try:
                _check_values(*args, meta, where)
                accepted = True
            except TraceError:
                accepted = False
            assert _values_in_range(*args, meta) == accepted, (col, v)


@pytest.mark.parametrize(
    "values",
    [
        [3, 3, 4, 5, 5, 7],  # a gap: the presence table's lookup
        [0, 0, 1, 1, 2],  # consecutive: the offsets themselves
        [-5, 2**40, 2**40],  # beyond int32: still the inverse of np.unique
        [2**31 + 2, 2**31 + 1],  # values beyond int32 with a small range
        [-(2**31), 2**31 - 1],  # a range that does not fit int32
        [7],
    ],
)
def test_dense_ids_match_unique(values: list[int]) -> None:
    from diagnosers.readers.normalize import dense_ids

    v = np.asarray(values, dtype=np.int64)
    for dtype in (np.int32, np.int64):
        uniq, inv = dense_ids(v, dtype)
        want_u, want_inv = np.unique(v, return_inverse=True)
        assert np.array_equal(uniq, want_u) and np.array_equal(inv, want_inv)
        assert inv.dtype == np.dtype(dtype)


def test_seq_id_slots_match_a_per_cell_check() -> None:
    """``_seq_ids_unique`` (one slot per row) agrees with the plain per-cell test (the sorted seq
    ids of each cell of c ops are 0..c-1) on random small tables, valid and broken."""
    from diagnosers.readers.normalize import _seq_ids_unique

    rng = np.random.default_rng(2)
    for trial in range(300):
        n_cells = int(rng.integers(1, 6))
        sizes = rng.integers(0, 5, n_cells)
        cell = np.repeat(np.arange(n_cells), sizes)
        seq = np.concatenate([rng.permutation(c) for c in sizes]).astype(np.int32)
        if trial % 2 and len(seq):
            seq[int(rng.integers(len(seq)))] += int(rng.choice([-2, -1, 1, 2]))
        perm = rng.permutation(len(cell))
        cell, seq = cell[perm].astype(np.intp), seq[perm]
        counts = np.bincount(cell, minlength=n_cells).astype(np.int64)
        want = all(sorted(seq[cell == c].tolist()) == list(range(int(counts[c]))) for c in range(n_cells))
        assert _seq_ids_unique(seq, cell, counts) == want


@pytest.mark.parametrize("backwards", [False, True])
@pytest.mark.parametrize("probe", [50, 2_000, 10**9])
def test_causality_probe_of_the_head_gives_the_full_answer(
    backwards: bool, probe: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The causality note looks at the first rows before all of them: the same note (or none) as
    matching every pair, for a trace whose pairs run forwards and one whose every recv was moved
    to end before its send starts (the note fires)."""
    from diagnosers.model import OPTYPE_CODE
    from diagnosers.readers import ReadOptions, load_trace, validate

    trace = load_trace([artifact_trace("ST")], ReadOptions())
    if backwards:  # each recv ends well before any send of the trace starts
        ops = trace.ops
        recv = np.isin(ops.optype, [OPTYPE_CODE["forward-recv"], OPTYPE_CODE["backward-recv"]])
        ops.start_ts = np.where(recv, ops.start_ts.min() - 10.0 - ops.duration, ops.start_ts)
    want = validate._p2p_pairs(trace, len(trace.ops))
    assert want[0] > 0
    monkeypatch.setattr(validate, "_CAUSALITY_PROBE", probe)
    note = validate.causality_note(trace)
    assert (note is not None) == (want[0] == want[1]) == backwards
    if note is not None:
        assert f"in all {want[0]} matched" in note


def test_sliced_lookup_and_counts_match_whole_array_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    from diagnosers.readers import normalize as nz

    monkeypatch.setattr(nz, "_SLICE", 7)  # many slices and a ragged last one
    rng = np.random.default_rng(8)
    table = rng.integers(-1, 20, 13).astype(np.int16)
    for n in (0, 1, 7, 50):
        idx = rng.integers(0, 13, n).astype(np.int8)
        got = nz._lookup(table, idx)
        assert got.dtype == table.dtype and np.array_equal(got, table[idx])
        assert np.array_equal(nz._counts(idx, 13), np.bincount(idx, minlength=13))
