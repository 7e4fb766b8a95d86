"""Turn raw op columns from any reader into a validated :class:`~diagnosers.model.Trace`.

Every reader (artifact schema, native JSON Lines, Kineto, NDTimeline) ends here, so the op-name table
of ``diagnosers.model`` (``classify_name``) and the validation rules live in one place:

- batched P2P names become two directional rows with the same timing;
- aliases map to their modelled slot; ``tp-*`` collectives are dropped (their time lives inside the
  surrounding compute spans); wrapper and sub-timer spans are dropped; both with a note;
- any other name is an error naming the op and where it first occurs (``strict_names``);
- missing columns, NaN or negative times, a worker holding ops of several ranks, a step whose op
  multiset differs across the DP ranks of a stage, and P2P ops in a single-stage job are errors.

Missing optional columns are derived: ``seq_id`` by start-time order within (worker, step, op type);
``mb_id`` by order for compute ops (interleaved 1F1B rule when ``vpp > 1``); ``mc`` / ``gmc`` from the
same rule for compute ops; -1 everywhere else.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from diagnosers.model import (
    ALIASES,
    BATCHED_P2P,
    COLUMNS,
    OPTYPE_CODE,
    OPTYPES,
    P2P_OPTYPES,
    JobMeta,
    NameClass,
    OpTable,
    Trace,
    TraceError,
    classify_name,
)
from diagnosers.readers import validate

REQUIRED_COLUMNS: tuple[str, ...] = ("dp_rank", "stage", "rank", "step", "optype", "start_ts", "duration")
OPTIONAL_COLUMNS: tuple[str, ...] = ("seq_id", "mc", "gmc", "mb_id")

_FWD = OPTYPE_CODE["forward-compute"]
_BWD = OPTYPE_CODE["backward-compute"]
_P2P_CODES = np.array([OPTYPE_CODE[n] for n in P2P_OPTYPES], dtype=np.int16)


Where = Callable[[int], dict[str, Any]]


def _first_non_number(arr: npt.NDArray[Any]) -> int:
    """Index of the first value ``float()`` rejects (error path only: a Python loop)."""
    for i, x in enumerate(arr):
        try:
            float(x)
        except (TypeError, ValueError):
            return i
    return 0


def _int_column(
    name: str, values: Any, n: int, source: str, where: Where, dtype: Any = np.int64
) -> npt.NDArray[Any]:
    """``values`` as integers of ``dtype`` (the op table's type of the column), converted once:
    an integer column of that type is returned as it is, a narrower one widened straight to it."""
    arr = np.asarray(values)
    if arr.ndim != 1 or len(arr) != n:
        raise TraceError(f"column {name!r} has {arr.shape} values, expected {n}", file=source)
    validate.check_int_array(name, arr, where)
    if arr.dtype.kind in "iub":
        if arr.dtype.itemsize > np.dtype(dtype).itemsize and n:
            info = np.iinfo(dtype)
            bad = (arr < info.min) | (arr > info.max)
            if bad.any():
                i = int(np.argmax(bad))
                raise TraceError(f"column {name!r} holds {int(arr[i])}, out of range", **where(i))
        return arr.astype(dtype, copy=False)
    try:
        f = arr.astype(np.float64)
    except (TypeError, ValueError) as exc:
        i = _first_non_number(arr)
        raise TraceError(f"column {name!r} holds {arr[i]!r}, not a number", **where(i)) from exc
    bad = ~np.isfinite(f) | (f != np.round(f))
    if bad.any():
        i = int(np.argmax(bad))
        raise TraceError(f"column {name!r} holds {f[i]:g}, not an integer", **where(i))
    return f.astype(dtype)


def _float_column(name: str, values: Any, n: int, source: str, where: Where) -> npt.NDArray[np.float64]:
    arr = np.asarray(values)
    if arr.ndim != 1 or len(arr) != n:
        raise TraceError(f"column {name!r} has {arr.shape} values, expected {n}", file=source)
    if arr.dtype.kind == "b":
        raise TraceError(f"column {name!r} holds booleans (true/false), not numbers", **where(0))
    try:
        return arr.astype(np.float64, copy=False)
    except (TypeError, ValueError) as exc:
        i = _first_non_number(arr)
        raise TraceError(f"column {name!r} holds {arr[i]!r}, not a number", **where(i)) from exc


def _group_rank(
    keys: Sequence[npt.NDArray[Any]], order_keys: Sequence[npt.NDArray[Any]]
) -> npt.NDArray[np.int64]:
    """Position of each row inside its group (rows with equal ``keys``), ordered by ``order_keys``.

    ``np.lexsort`` takes its last key as the primary one, so groups come last.
    """
    n = len(keys[0])
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((np.arange(n), *order_keys, *keys[::-1]))
    new = np.zeros(n, dtype=bool)
    new[0] = True
    for k in keys:
        ks = k[order]
        new[1:] |= ks[1:] != ks[:-1]
    starts = np.where(new, np.arange(n), 0)
    np.maximum.accumulate(starts, out=starts)
    out = np.empty(n, dtype=np.int64)
    out[order] = np.arange(n) - starts
    return out


def reduce_into(
    ufunc: np.ufunc,
    index: npt.NDArray[np.integer[Any]],
    values: npt.NDArray[np.float64],
    size: int,
    fill: float,
) -> npt.NDArray[np.float64]:
    """``ufunc.at(np.full(size, fill), index, values)`` for ``np.minimum`` or ``np.maximum`` (a
    per-group minimum or maximum). Rows come in runs of one index value (each (step, worker) block
    of every trace seen is one run), so each run is reduced with one ``ufunc.reduceat`` and only
    the runs' results go through the slow ``ufunc.at``: the same values in any row order, since a
    minimum or maximum does not depend on the order it is taken in."""
    out = np.full(size, fill)
    if len(index) == 0:
        return out
    starts = np.r_[0, np.flatnonzero(index[1:] != index[:-1]) + 1]
    ufunc.at(out, index[starts], ufunc.reduceat(values, starts))
    return out


def dense_ids(
    values: npt.NDArray[Any], dtype: Any = np.int64
) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any]]:
    """``np.unique(values, return_inverse=True)`` for integer columns with few distinct values
    (steps, ranks): a presence table over the value range instead of a sort of every row. The
    inverse comes in ``dtype`` (int32 for a row map that needs no more). When every value of the
    range occurs (consecutive step ids) the inverse is the offset from the minimum itself."""
    v = np.asarray(values)
    if len(v) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=dtype)
    lo, hi = int(v.min()), int(v.max())
    if hi - lo > 4 * len(v) + 1_000_000:
        uniq, inv = np.unique(v, return_inverse=True)
        return uniq.astype(np.int64), inv.reshape(-1).astype(dtype)
    # the offsets computed straight in the inverse's type when the values and their range fit it
    # (exact, and no 64-bit copy of the column)
    info = np.iinfo(dtype)
    fits = info.min <= lo and hi <= info.max and hi - lo <= info.max
    off = np.subtract(v, lo, dtype=dtype) if fits else v - lo
    present = np.zeros(hi - lo + 1, dtype=bool)
    present[off] = True
    uniq = np.flatnonzero(present)
    if fits and len(uniq) == hi - lo + 1:
        return uniq + lo, off
    lookup = np.cumsum(present, dtype=dtype) - 1
    return uniq + lo, lookup[off]


_RAW_DTYPES: dict[str, Any] = {
    "dp_rank": np.int64,
    "stage": np.int64,
    "rank": np.int64,
    "step": np.int64,
    "optype": object,
    "start_ts": np.float64,
    "duration": np.float64,
}


def columns_from_lists(cols: Mapping[str, Sequence[Any]]) -> dict[str, npt.NDArray[Any]]:
    """The required op-table columns as arrays, from per-row lists (readers that build rows one
    event at a time); ``optype`` stays as names for ``normalize`` to classify."""
    return {k: np.asarray(cols[k], dtype=dt) for k, dt in _RAW_DTYPES.items()}


def meta_from_data(columns: Mapping[str, Any], base: Mapping[str, Any] | None = None) -> JobMeta:
    """A ``JobMeta`` whose ``dp`` / ``pp`` default to what the trace shows (max rank index + 1).

    Keys given in ``base`` (JobMeta field names or the artifact's ``*_size`` keys) win.
    """
    given = dict(base or {})
    meta = JobMeta.from_artifact_yaml(given)
    kw = meta.model_dump()
    dp = np.asarray(columns["dp_rank"])
    st = np.asarray(columns["stage"])
    if "dp" not in given and "dp_size" not in given and len(dp):
        kw["dp"] = int(np.max(dp)) + 1
    if "pp" not in given and "pp_size" not in given and len(st):
        kw["pp"] = int(np.max(st)) + 1
    if "world_size" not in given:
        kw["world_size"] = 0
    return JobMeta(**kw)


def normalize(
    columns: Mapping[str, npt.NDArray[Any]],
    meta: JobMeta,
    *,
    source: str,
    strict_names: bool = True,
    optype_categories: Sequence[str] | None = None,
) -> Trace:
    """Map raw op names onto the model, derive missing columns, validate, and build a ``Trace``.

    ``columns`` holds ``dp_rank, stage, rank, step, optype, start_ts, duration`` and optionally
    ``seq_id, mc, gmc, mb_id``. ``optype`` holds the raw recorded names (strings); when
    ``optype_categories`` is given it holds integer indices into that list instead (a dictionary
    encoded column, which avoids a string sort for multi-million-row inputs). ``source`` names the
    file(s) in error messages. With ``strict_names=False`` unknown names are dropped with a note
    instead of raising.

    Row order: rows that come sorted by step with each (step, worker) block contiguous (the
    (step, rank) order every known writer uses, whatever the order inside a block) keep their
    order; anything else is sorted by (step, dp rank, stage, op type, seq_id). Nothing downstream
    depends on the order inside a block. Columns are converted once, straight to the op table's
    types.
    """
    missing = [c for c in REQUIRED_COLUMNS if c not in columns]
    if missing:
        raise TraceError(f"missing columns: {', '.join(missing)}", file=source)
    notes: list[str] = []
    raw_opt = np.asarray(columns["optype"])
    n = len(raw_opt)
    cats, inv = _categories(raw_opt, optype_categories, source)

    def raw_where(i: int) -> dict[str, Any]:
        """file, rank, step, op of raw row ``i`` for a column error (rank/step when readable)."""
        out: dict[str, Any] = {"file": source, "op": cats[int(inv[i])]}
        for key in ("rank", "step"):
            with contextlib.suppress(TypeError, ValueError):
                out[key] = int(float(np.asarray(columns[key])[i]))
        return out

    def int_col(name: str) -> npt.NDArray[Any]:
        return _int_column(name, columns[name], n, source, raw_where, COLUMNS[name])

    dp_rank, stage, rank, step = int_col("dp_rank"), int_col("stage"), int_col("rank"), int_col("step")
    start_ts = _float_column("start_ts", columns["start_ts"], n, source, raw_where)
    duration = _float_column("duration", columns["duration"], n, source, raw_where)

    first_code, second_code, aliased = _code_tables(cats, inv, rank, step, source, strict_names, notes)
    split = bool((second_code >= 0).any())
    codes = _lookup(first_code, inv)
    # rows: which raw row each output row comes from; None while that is the identity (nothing
    # dropped, nothing split), so no column is gathered for nothing
    rows: npt.NDArray[np.int64] | None = None
    if split or bool((codes < 0).any()):
        keep_idx = np.flatnonzero(codes >= 0)
        dup_idx = np.flatnonzero(second_code[inv] >= 0)
        rows = np.concatenate([keep_idx, dup_idx])
        codes = np.concatenate([codes[keep_idx], second_code[inv][dup_idx]])
        dp_rank, stage, rank, step = dp_rank[rows], stage[rows], rank[rows], step[rows]
        start_ts, duration = start_ts[rows], duration[rows]
    reordered = split or aliased
    m = len(codes)
    if m == 0:
        raise TraceError("the trace holds no modelled ops", file=source)
    names = np.asarray(OPTYPES)

    def where(i: int) -> dict[str, Any]:
        return {"file": source, "rank": int(rank[i]), "step": int(step[i]), "op": str(names[codes[i]])}

    def optional(name: str) -> npt.NDArray[Any]:
        arr = int_col(name)
        return arr if rows is None else arr[rows]

    _check_values(start_ts, duration, dp_rank, stage, rank, meta, where)
    rmin = _check_workers(dp_rank, stage, rank, meta, source)
    if meta.pp == 1:
        p2p = np.isin(codes, _P2P_CODES)
        if p2p.any():
            i = int(np.argmax(p2p))
            raise TraceError("point-to-point op in a single-stage job has no peer", **where(i))
    step_ids, step_idx = dense_ids(step, np.int32)  # int32 row maps: half the memory of int64
    counts, cell, runs = _check_step_multisets(stage, step_idx, dp_rank, codes, step_ids, rmin, meta, source)

    # --- optional columns
    given = {c: c in columns for c in OPTIONAL_COLUMNS}
    if given["seq_id"] and not reordered:
        seq_id = optional("seq_id")
    else:
        seq_id = _group_rank([dp_rank, stage, step_idx, codes], [start_ts]).astype(np.int32)
        if given["seq_id"]:
            notes.append("re-derived seq_id after splitting or renaming ops")
    is_compute = (codes == _FWD) | (codes == _BWD)
    mb_id = optional("mb_id") if given["mb_id"] else np.full(m, -1, dtype=np.int32)
    mc = optional("mc") if given["mc"] else np.full(m, -1, dtype=np.int32)
    if not (given["mb_id"] and given["mc"]) and is_compute.any():
        _derive_chunks(seq_id, codes, is_compute, mb_id, mc, given, meta, notes)
    gmc = (
        optional("gmc")
        if given["gmc"]
        else np.where(is_compute, mc * meta.pp + stage, -1).astype(np.int32, copy=False)
    )

    cols: dict[str, npt.NDArray[Any]] = {
        "dp_rank": dp_rank, "stage": stage, "rank": rank, "step": step, "optype": codes,
        "start_ts": start_ts, "duration": duration, "seq_id": seq_id, "mc": mc, "gmc": gmc, "mb_id": mb_id,
    }  # fmt: skip
    if not (_in_step_blocks(step_idx, runs, counts) and _seq_ids_unique(seq_id, cell, counts)):
        max_seq = int(seq_id.max()) + 1 if len(seq_id) else 1
        validate.check_key_space(len(step_ids) * meta.dp * meta.pp, len(OPTYPES), max_seq, source)
        order = _canonical_order(step_idx, dp_rank, stage, codes, seq_id, meta, where)
        cols = {c: a[order] for c, a in cols.items()}
    assert set(COLUMNS) == set(REQUIRED_COLUMNS) | set(OPTIONAL_COLUMNS)
    return Trace(ops=OpTable(**cols), meta=meta, notes=notes, sources=[source])


def _categories(
    raw_opt: npt.NDArray[Any], optype_categories: Sequence[str] | None, source: str
) -> tuple[list[str], npt.NDArray[Any]]:
    """The distinct recorded op names and each row's index into them (kept in its integer type)."""
    n = len(raw_opt)
    if optype_categories is not None:
        cats = [str(c) for c in optype_categories]
        if raw_opt.dtype.kind not in "iu":
            raw_opt = raw_opt.astype(np.int64)
        if n and (raw_opt.min() < 0 or raw_opt.max() >= len(cats)):
            raise TraceError("optype index outside its category list", file=source)
        return cats, raw_opt
    if raw_opt.dtype.kind in "iu":
        # already codes into OPTYPES
        if n and (raw_opt.min() < 0 or raw_opt.max() >= len(OPTYPES)):
            raise TraceError("optype code outside the modelled op types", file=source)
        return list(OPTYPES), raw_opt
    uniq, inv = np.unique(raw_opt.astype(str), return_inverse=True)
    return [str(u) for u in uniq], inv.reshape(-1)


_SLICE = 1 << 20  # rows per slice of a row-sized lookup or count: bounded index temporaries


def _lookup(table: npt.NDArray[Any], idx: npt.NDArray[np.integer[Any]]) -> npt.NDArray[Any]:
    """``table[idx]`` a slice of rows at a time: numpy widens a narrow index (the int8 op-name
    codes) to its own index type before a gather, which for every row at once is a row-sized
    int64 temporary."""
    out = np.empty(len(idx), dtype=table.dtype)
    for lo in range(0, len(idx), _SLICE):
        out[lo : lo + _SLICE] = table[idx[lo : lo + _SLICE]]
    return out


def _counts(idx: npt.NDArray[np.integer[Any]], n: int) -> npt.NDArray[np.int64]:
    """``np.bincount(idx, minlength=n)`` a slice of rows at a time (see ``_lookup``)."""
    out = np.zeros(n, dtype=np.int64)
    for lo in range(0, len(idx), _SLICE):
        out += np.bincount(idx[lo : lo + _SLICE], minlength=n)
    return out


def _code_tables(
    cats: list[str],
    inv: npt.NDArray[Any],
    rank: npt.NDArray[np.int64],
    step: npt.NDArray[np.int64],
    source: str,
    strict_names: bool,
    notes: list[str],
) -> tuple[npt.NDArray[np.int16], npt.NDArray[np.int16], bool]:
    """Per recorded name: its modelled op code and, for a batched P2P name, the second code
    (-1 where none: the name is dropped), and whether some name was an alias. Notes say what was
    split, renamed, folded or dropped."""
    aliased = False
    first_code = np.full(len(cats), -1, dtype=np.int16)
    second_code = np.full(len(cats), -1, dtype=np.int16)
    used = _counts(inv, len(cats))
    for ci, name in enumerate(cats):
        if used[ci] == 0:
            continue  # e.g. a parquet category list naming an unused value
        kind = classify_name(name)
        count = int(used[ci])
        if kind is NameClass.MODELLED:
            first_code[ci] = OPTYPE_CODE[name]
        elif kind is NameClass.BATCHED:
            a, b = BATCHED_P2P[name]
            first_code[ci], second_code[ci] = OPTYPE_CODE[a], OPTYPE_CODE[b]
            notes.append(f"split {count} batched {name!r} ops into {a!r} + {b!r} with the same timing")
        elif kind is NameClass.ALIAS:
            first_code[ci] = OPTYPE_CODE[ALIASES[name]]
            aliased = True
            notes.append(f"read {count} {name!r} ops as {ALIASES[name]!r}")
        elif kind is NameClass.FOLDED:
            notes.append(f"folded {count} {name!r} ops into the surrounding compute (TP is collapsed)")
        elif kind is NameClass.IGNORED:
            notes.append(f"ignored {count} {name!r} spans (wrapper or sub-timer)")
        else:
            i = int(np.argmax(inv == ci))
            if strict_names:
                raise TraceError(
                    f"unknown op type {name!r} (see the op-name table in docs/FORMAT.md)",
                    file=source,
                    rank=int(rank[i]),
                    step=int(step[i]),
                    op=name,
                )
            notes.append(f"dropped {count} ops of unknown type {name!r}")
    return first_code, second_code, aliased


def _check_values(
    start_ts: npt.NDArray[np.float64],
    duration: npt.NDArray[np.float64],
    dp_rank: npt.NDArray[np.int32],
    stage: npt.NDArray[np.int32],
    rank: npt.NDArray[np.int64],
    meta: JobMeta,
    where: Where,
) -> None:
    """Finite times, non-negative durations and ranks, ranks inside the job's dp and pp sizes.

    Each column's extremes decide whether all of it passes (the usual case, without a boolean
    temporary per check); only a failing trace takes the row-by-row tests that name the first bad
    row."""
    if _values_in_range(start_ts, duration, dp_rank, stage, rank, meta):
        return
    for col, arr in (("start_ts", start_ts), ("duration", duration)):
        bad = ~np.isfinite(arr)
        if bad.any():
            i = int(np.argmax(bad))
            raise TraceError(f"{col} is {float(arr[i])}", **where(i))
    validate.check_times(start_ts, duration, where)
    if (duration < 0).any():
        i = int(np.argmax(duration < 0))
        raise TraceError(f"negative duration {float(duration[i])}", **where(i))
    for col, iarr in (("dp_rank", dp_rank), ("stage", stage), ("rank", rank)):
        if (iarr < 0).any():
            i = int(np.argmax(iarr < 0))
            raise TraceError(f"negative {col} {int(iarr[i])}", **where(i))
    if (dp_rank >= meta.dp).any():
        i = int(np.argmax(dp_rank >= meta.dp))
        raise TraceError(
            f"dp_rank {int(dp_rank[i])} is outside the job's dp size {meta.dp} (check --dp or the meta yaml)",
            **where(i),
        )
    if (stage >= meta.pp).any():
        i = int(np.argmax(stage >= meta.pp))
        raise TraceError(
            f"stage {int(stage[i])} is outside the job's pp size {meta.pp} (check --pp or the meta yaml)",
            **where(i),
        )


def _values_in_range(
    start_ts: npt.NDArray[np.float64],
    duration: npt.NDArray[np.float64],
    dp_rank: npt.NDArray[np.int32],
    stage: npt.NDArray[np.int32],
    rank: npt.NDArray[np.int64],
    meta: JobMeta,
) -> bool:
    """Whether every test of ``_check_values`` passes, from the columns' minima and maxima: a NaN
    makes both NaN (not finite), an infinity makes one of them infinite, and every range test is
    a bound that only an extreme can cross."""
    if len(start_ts) == 0:
        return True
    for arr, least in ((start_ts, -validate.MAX_TIME), (duration, 0.0)):
        lo, hi = float(arr.min()), float(arr.max())
        if not (math.isfinite(lo) and math.isfinite(hi)) or lo < least or max(-lo, hi) > validate.MAX_TIME:
            return False
    for iarr, size in ((dp_rank, meta.dp), (stage, meta.pp), (rank, None)):
        if int(iarr.min()) < 0 or (size is not None and int(iarr.max()) >= size):
            return False
    return True


def _check_workers(
    dp_rank: npt.NDArray[np.int32],
    stage: npt.NDArray[np.int32],
    rank: npt.NDArray[np.int64],
    meta: JobMeta,
    source: str,
) -> npt.NDArray[np.int64]:
    """Every worker (dp, pp) holds ops, all of one traced rank; returns each worker's rank."""
    validate.check_layout(meta.dp, meta.pp, len(dp_rank), source)
    worker = dp_rank * meta.pp + stage  # int32: dp * pp workers fit
    n_workers = meta.dp * meta.pp
    rmin = np.full(n_workers, np.iinfo(np.int64).max)
    rmax = np.full(n_workers, -1, dtype=np.int64)
    # one reduction per run of rows of one worker (a (step, worker) block), then the slow
    # ``ufunc.at`` over the runs only: the same extremes in any row order
    starts = np.r_[0, np.flatnonzero(worker[1:] != worker[:-1]) + 1]
    heads = worker[starts]
    np.minimum.at(rmin, heads, np.minimum.reduceat(rank, starts))
    np.maximum.at(rmax, heads, np.maximum.reduceat(rank, starts))
    absent = np.flatnonzero(rmax < 0)
    if len(absent):
        w = int(absent[0])
        raise TraceError(
            f"no ops for worker dp_rank={w // meta.pp}, stage={w % meta.pp} "
            f"({len(absent)} of {n_workers} workers missing; check --dp/--pp or the meta yaml)",
            file=source,
        )
    multi = np.flatnonzero(rmin != rmax)
    if len(multi):
        w = int(multi[0])
        raise TraceError(
            f"worker dp_rank={w // meta.pp}, stage={w % meta.pp} holds ops of ranks {int(rmin[w])} and "
            f"{int(rmax[w])}; keep one traced rank per TP/CP group",
            file=source,
            rank=int(rmin[w]),
        )
    return rmin


def _check_step_multisets(
    stage: npt.NDArray[np.int32],
    step_idx: npt.NDArray[np.integer[Any]],
    dp_rank: npt.NDArray[np.int32],
    codes: npt.NDArray[np.int16],
    step_ids: npt.NDArray[np.int64],
    rmin: npt.NDArray[np.int64],
    meta: JobMeta,
    source: str,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.intp], int]:
    """Each step's op multiset is the same on every DP rank of a stage.

    Returns the op counts per (stage, step, dp rank, op type) cell, shape (pp, steps, dp, types),
    each row's flat cell index into them (in numpy's index type: it is counted and gathered with,
    and a narrower index is widened to it on each of those calls), and the number of runs of
    consecutive rows in one (stage, step, dp rank) block."""
    n_types = len(OPTYPES)
    validate.check_grid(meta.pp, len(step_ids), meta.dp, len(codes), source)
    n_cells = meta.pp * len(step_ids) * meta.dp * n_types
    # ((stage * steps + step) * dp + dp_rank) * types + code, built in place in one array
    cell = stage.astype(np.intp)
    cell *= len(step_ids)
    cell += step_idx
    cell *= meta.dp
    cell += dp_rank
    runs = int(np.count_nonzero(cell[1:] != cell[:-1])) + 1 if len(cell) else 0
    cell *= n_types
    cell += codes
    counts = np.bincount(cell, minlength=n_cells).reshape(
        meta.pp, len(step_ids), meta.dp, n_types
    )
    diff = counts != counts[:, :, :1, :]
    if diff.any():
        s, t, d, o = (int(x) for x in np.argwhere(diff)[0])
        ref_rank = int(rmin[0 * meta.pp + s])
        bad_rank = int(rmin[d * meta.pp + s])
        raise TraceError(
            f"step op multiset differs across DP ranks of stage {s}: dp_rank {d} has "
            f"{counts[s, t, d, o]} {OPTYPES[o]!r} ops, dp_rank 0 (rank {ref_rank}) has {counts[s, t, 0, o]}",
            file=source,
            rank=bad_rank,
            step=int(step_ids[t]),
            op=OPTYPES[o],
        )
    return counts, cell, runs


def _derive_chunks(
    seq_id: npt.NDArray[np.int32],
    codes: npt.NDArray[np.int16],
    is_compute: npt.NDArray[np.bool_],
    mb_id: npt.NDArray[np.int32],
    mc: npt.NDArray[np.int32],
    given: dict[str, bool],
    meta: JobMeta,
    notes: list[str],
) -> None:
    """Fill the missing ``mb_id`` / ``mc`` of compute ops (in place) from their seq_id: the
    position is the microbatch when vpp = 1, Megatron's interleaved 1F1B rule otherwise."""
    k = seq_id[is_compute]
    fwd = codes[is_compute] == _FWD
    if meta.vpp == 1:
        d_chunk = np.zeros(len(k), dtype=np.int32)
        d_mb = k
    else:
        # Megatron's interleaved 1F1B: groups of pp microbatches cycle through the chunks;
        # backward visits the chunks in reverse.
        group = meta.pp * meta.vpp
        d_chunk = (k % group) // meta.pp
        d_chunk = np.where(fwd, d_chunk, meta.vpp - 1 - d_chunk)
        d_mb = (k // group) * meta.pp + k % meta.pp
        notes.append("derived model chunks and microbatch ids from the interleaved 1F1B schedule")
    if not given["mb_id"]:
        mb_id[is_compute] = d_mb
    if not given["mc"]:
        mc[is_compute] = d_chunk


def _in_step_blocks(step_idx: npt.NDArray[np.integer[Any]], runs: int, counts: npt.NDArray[np.int64]) -> bool:
    """Rows sorted by step, each (step, worker) block contiguous: as many runs of one block as
    there are blocks holding ops."""
    m = len(step_idx)
    if m <= 1:
        return True
    if not bool(np.all(step_idx[1:] >= step_idx[:-1])):
        return False
    return runs == int(np.count_nonzero(counts.sum(axis=3)))


def _seq_ids_unique(
    seq_id: npt.NDArray[np.int32], cell: npt.NDArray[np.intp], counts: npt.NDArray[np.int64]
) -> bool:
    """Within each (stage, step, dp rank, op type) cell of c ops the seq_ids are exactly 0..c-1,
    checked without a sort: each row claims slot ``offset[cell] + seq_id`` of one per-row table.
    False sends the rows to the sorting path, which names a duplicate. The slots are computed a
    slice of rows at a time, so the check holds no row-sized index besides ``cell``."""
    flat = counts.reshape(-1)
    first = np.cumsum(flat) - flat  # per cell: its first slot
    seen = np.zeros(len(seq_id), dtype=bool)
    for lo in range(0, len(seq_id), _SLICE):
        c, q = cell[lo : lo + _SLICE], seq_id[lo : lo + _SLICE]
        if int(q.min()) < 0 or bool((q >= flat[c]).any()):
            return False
        slot = first[c]
        slot += q
        seen[slot] = True
    return bool(seen.all())


def _canonical_order(
    step_idx: npt.NDArray[np.integer[Any]],
    dp_rank: npt.NDArray[np.int32],
    stage: npt.NDArray[np.int32],
    codes: npt.NDArray[np.int16],
    seq_id: npt.NDArray[np.int32],
    meta: JobMeta,
    where: Where,
) -> npt.NDArray[np.int64]:
    """The permutation sorting rows by (step, dp rank, stage, op type, seq_id); a repeated key
    is a duplicate seq_id, reported at its second row."""
    m = len(codes)
    max_seq = int(seq_id.max()) + 1 if m else 1
    key = (((step_idx.astype(np.int64) * meta.dp + dp_rank) * meta.pp + stage) * len(OPTYPES) + codes)
    key = key * max_seq + seq_id
    if m > 1 and bool(np.all(key[1:] > key[:-1])):
        return np.arange(m)
    order = np.argsort(key, kind="stable")
    sk = key[order]
    dup = sk[1:] == sk[:-1]
    if dup.any():
        j = int(order[int(np.argmax(dup)) + 1])
        raise TraceError(f"duplicate seq_id {int(seq_id[j])}", **where(j))
    return order
