"""The readers' edge: budgets and checks applied before a reader allocates what a file asks for.

A small hostile file can ask for a lot: a YAML alias tree that expands to gigabytes, a gzip
layer inside the uploaded gzip, a run-length-encoded parquet file of millions of identical rows,
``dp``/``pp`` sizes far beyond its rows, seq ids whose sort key overflows, times that overflow to
``inf`` once the analysis adds them up. The checks here refuse such input with a
:class:`~diagnosers.readers.errors.LimitExceeded` or ``TraceError`` that says what and where,
before the large allocation happens.

Budgets (``ReadLimits``; the server sets its own, see docs/SERVER.md):

- ``max_decompressed_bytes``: every decompression layer a reader opens (``open_gzip``) and the
  uncompressed size of parquet column chunks count against one budget per ``load_trace`` call;
- ``max_ops``: rows per ``load_trace`` call, checked from parquet metadata before reading rows
  and after parsing the text formats (None: unbounded, the CLI default);
- ``max_parallel``: the largest dp / pp / tp / cp / vpp value accepted.

The budget of the current read lives in a context variable set by :func:`reading`, so the
format modules need no extra parameter.
"""

from __future__ import annotations

import contextlib
import contextvars
import gzip
import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, cast

import numpy as np
import numpy.typing as npt

from diagnosers.model import TraceError
from diagnosers.readers.errors import LimitExceeded, short

GIB = 1024**3
MIB = 1024**2

# Meta yaml files are a handful of keys: anything larger or deeper is not a meta file.
MAX_YAML_BYTES = 256 * 1024
MAX_YAML_DEPTH = 16
# Times beyond this (in the file's own unit) are refused: the analysis adds and subtracts them
# over millions of ops, and 1e15 leaves ample room before a float64 overflows or loses the unit.
MAX_TIME = 1e15
# The sort key of normalize packs (step, worker, op type, seq id) into one int64.
MAX_KEY = 2**62
INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class ReadLimits:
    """What one ``load_trace`` call may consume. The defaults are the CLI's: a decompression
    budget of 64 GiB and no op bound (the CLI reads what its user gives it)."""

    max_decompressed_bytes: int | None = 64 * GIB
    max_ops: int | None = None
    max_parallel: int = 1_000_000
    # decoded bytes of one JSON document (Kineto, NDTimeline chrome); None: unbounded
    max_json_bytes: int | None = None


class _Budget:
    def __init__(self, limits: ReadLimits):
        self.limits = limits
        self.expanded = 0
        self.ops = 0

    def take_bytes(self, n: int, source: str | None) -> None:
        self.expanded += n
        cap = self.limits.max_decompressed_bytes
        if cap is not None and self.expanded > cap:
            raise LimitExceeded(
                f"decompressed data exceeds the budget of {cap // MIB} MiB (every compression layer "
                "counts); refusing a possible decompression bomb",
                file=source,
            )

    def take_ops(self, n: int, source: str | None) -> None:
        self.ops += n
        cap = self.limits.max_ops
        if cap is not None and self.ops > cap:
            raise LimitExceeded(
                f"the trace holds more than {cap:,} ops (this one: at least {self.ops:,}); the "
                "server's --max-ops bounds an upload (the CLI reads any size)",
                file=source,
            )


_BUDGET: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar("read_budget", default=None)


def _budget() -> _Budget:
    b = _BUDGET.get()
    return b if b is not None else _Budget(ReadLimits())


def limits() -> ReadLimits:
    """The limits of the read in progress (the defaults outside :func:`reading`)."""
    return _budget().limits


@contextlib.contextmanager
def reading(lim: ReadLimits | None) -> Iterator[None]:
    """Run one trace read under ``lim``: one byte budget and one op count for all of its files."""
    token = _BUDGET.set(_Budget(lim or ReadLimits()))
    try:
        yield
    finally:
        _BUDGET.reset(token)


# -- decompression ---------------------------------------------------------------------------------


class _Counted(io.RawIOBase):
    """A raw stream over a decompressing file object that charges every byte to the budget."""

    def __init__(self, inner: Any, source: str):
        self.inner, self.source, self.budget = inner, source, _budget()

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        data = self.inner.read(min(len(buf), 1 << 20))  # bounded pieces: no second full copy
        self.budget.take_bytes(len(data), self.source)
        buf[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self.inner.close()
        super().close()


def open_gzip(path: Path) -> BinaryIO:
    """A buffered binary stream of the gunzipped ``path`` whose output counts against the budget."""
    raw = _Counted(gzip.open(path, "rb"), str(path))  # noqa: SIM115 (closed with the returned stream)
    return cast(BinaryIO, io.BufferedReader(raw, buffer_size=1024 * 1024))


def gunzip_bytes(data: bytes, source: str) -> bytes:
    """``gzip.decompress`` under the budget (inflates in bounded pieces, never the whole bomb)."""
    with io.BufferedReader(_Counted(gzip.GzipFile(fileobj=io.BytesIO(data)), source)) as fh:
        return fh.read()


def check_json_size(n: int, source: str) -> None:
    """Refuse a JSON document larger than ``max_json_bytes`` (the parse holds it whole)."""
    cap = limits().max_json_bytes
    if cap is not None and n > cap:
        raise LimitExceeded(
            f"the JSON document is larger than {cap // MIB} MiB (--max-json-mb); the profiler-JSON "
            "reader holds a document whole, at several bytes of memory per input byte",
            file=source,
        )


def read_json_bytes(fh: BinaryIO, source: str) -> bytes:
    """The whole stream, read at most ``max_json_bytes + 1`` bytes far."""
    cap = limits().max_json_bytes
    data = fh.read() if cap is None else fh.read(cap + 1)
    check_json_size(len(data), source)
    return data


# -- counts ------------------------------------------------------------------------------------------


def take_ops(n: int, source: str | None) -> None:
    """Charge ``n`` rows to the op bound of the read in progress."""
    _budget().take_ops(int(n), source)


def check_parquet(meta: Any, source: str) -> None:
    """Refuse a parquet file from its footer alone: its row count against the op bound and the
    uncompressed size of its column chunks against the decompression budget."""
    take_ops(meta.num_rows, source)
    size = 0
    for g in range(meta.num_row_groups):
        rg = meta.row_group(g)
        size += sum(int(rg.column(c).total_uncompressed_size or 0) for c in range(rg.num_columns))
    _budget().take_bytes(size, source)


def check_size(key: str, value: Any, source: str | None) -> int:
    """A parallel size from a meta file, a job line or an option: not a boolean and at most the
    bound (other type and range problems are the job model's to word)."""
    cap = limits().max_parallel
    if isinstance(value, bool) or (isinstance(value, int) and value > cap):
        raise TraceError(f"{key} must be an integer between 1 and {cap:,}, got {short(value)}", file=source)
    return value


def check_layout(dp: int, pp: int, rows: int, source: str) -> None:
    """Every DP x PP worker needs ops of its own: a layout with more workers than rows is refused
    before anything of that size is allocated."""
    if dp * pp > max(rows, 1):
        raise LimitExceeded(
            f"dp={dp} x pp={pp} = {dp * pp:,} workers but the trace holds only {rows:,} ops; every "
            "worker needs its own ops (check --dp/--pp or the meta file)",
            file=source,
        )


def check_grid(pp: int, steps: int, dp: int, rows: int, source: str) -> None:
    """(stage, step, dp rank) cells are counted densely: refuse a trace where most cells hold no op
    (a few ops spread over many steps and workers), which no real job produces."""
    cells = pp * steps * dp
    if cells > 4 * rows + 1_000_000:
        raise LimitExceeded(
            f"{steps:,} steps on {dp * pp:,} workers is {cells:,} (step, worker) cells for only "
            f"{rows:,} ops: most workers miss most steps",
            file=source,
        )


def check_key_space(cells: int, n_types: int, max_seq: int, source: str) -> None:
    """The canonical sort key must fit an int64: seq ids far beyond the op count are refused."""
    if cells * n_types * max(max_seq, 1) >= MAX_KEY:
        raise TraceError(
            f"seq_id values up to {max_seq - 1:,} are too large (a seq_id numbers an op among the "
            "ops of its kind in one step of one worker)",
            file=source,
        )


# -- column values -----------------------------------------------------------------------------------


def check_int_array(name: str, arr: npt.NDArray[Any], where: Any) -> None:
    """A raw integer column: booleans are not numbers, and every value fits an int64 with room
    for the analysis's arithmetic (``|v| < 2**62``; ids of 32-bit columns below 2**31)."""
    if arr.dtype.kind == "b":
        raise TraceError(f"column {name!r} holds booleans (true/false), not numbers", **where(0))
    if arr.dtype.kind in "iuf" and len(arr):
        limit = INT32_MAX if name in _INT32 else 2**62
        if arr.dtype.kind in "iu" and not _int_extremes_reach(arr, limit):
            return  # the usual case, without a float copy of the column
        with np.errstate(invalid="ignore"):
            big = np.abs(arr.astype(np.float64)) >= limit
        if big.any():
            i = int(np.argmax(big))
            value = short(arr[i].item())
            raise TraceError(f"column {name!r} holds {value}, too large for its column", **where(i))
    elif arr.dtype == object and len(arr):
        for i, x in enumerate(arr[: min(len(arr), 1_000_000)]):
            if isinstance(x, bool) or (x is not None and not isinstance(x, int | float | str | np.number)):
                kind = "booleans" if isinstance(x, bool) else f"{type(x).__name__} values"
                raise TraceError(f"column {name!r} holds {kind} ({short(x)}), not numbers", **where(i))


_INT32 = frozenset({"dp_rank", "stage", "seq_id", "mc", "gmc", "mb_id"})


def _int_extremes_reach(arr: npt.NDArray[Any], limit: int) -> bool:
    """Whether any value of the integer array ``arr`` has ``|float(v)| >= limit``. ``float`` is
    monotonic, so only the minimum and the maximum need the test; a column too narrow to hold
    ``limit`` cannot reach it at all."""
    info = np.iinfo(arr.dtype)
    if max(abs(float(info.min)), float(info.max)) < limit:
        return False
    return max(abs(float(arr.min())), abs(float(arr.max()))) >= limit


def check_times(start: npt.NDArray[np.float64], dur: npt.NDArray[np.float64], where: Any) -> None:
    """Times and durations within ``MAX_TIME``, so that sums over a job stay finite."""
    for col, arr in (("start_ts", start), ("duration", dur)):
        big = np.abs(arr) > MAX_TIME
        if big.any():
            i = int(np.argmax(big))
            raise TraceError(
                f"{col} {float(arr[i]):g} is beyond {MAX_TIME:g}: the analysis would overflow", **where(i)
            )


_NUMERIC = ("dp_rank", "stage", "rank", "step", "start_ts", "duration", "seq_id", "mc", "gmc", "mb_id")


def check_table(table: Any, source: str) -> None:
    """Column types of a pyarrow op table: numbers where numbers belong (not booleans, binary or
    nested values), names (strings) in ``optype``."""
    import pyarrow as pa

    t = pa.types
    for name in table.column_names:
        typ = table.schema.field(name).type
        if t.is_dictionary(typ):
            typ = typ.value_type
        nested = t.is_nested(typ)
        binary = t.is_binary(typ) or t.is_large_binary(typ) or t.is_fixed_size_binary(typ)
        if name == "optype":
            if nested or binary or t.is_boolean(typ):
                raise TraceError(f"column 'optype' holds {typ} values, not op names", file=source)
        elif name in _NUMERIC:
            if t.is_boolean(typ):
                raise TraceError(f"column {name!r} holds booleans (true/false), not numbers", file=source)
            if nested or binary:
                raise TraceError(f"column {name!r} holds {typ} values, not numbers", file=source)


# -- meta files ---------------------------------------------------------------------------------------


# A meta file of ``key: value`` lines only, each value a decimal integer or a word that starts with
# a letter, or a ``key:`` line followed by ``- <integer>`` lines (a list of layer counts): what every
# writer seen produces (the study's samples, ``write_meta_yaml``). YAML reads such a file as these
# strings, ints and int lists, except for the words YAML 1.1 turns into booleans or null (checked
# below, as keys too), so these files need no YAML parser.
_FLAT_LINE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*):(?: +(0|-?[1-9][0-9]*|[A-Za-z][A-Za-z0-9_.-]*))? *")
_FLAT_ITEM = re.compile(r"- +(0|-?[1-9][0-9]*) *")
_YAML_WORDS = frozenset({"yes", "no", "true", "false", "on", "off", "null", "y", "n"})


def flat_yaml(text: str) -> dict[str, int | str | list[int]] | None:
    """The mapping of a meta file made only of ``key: value`` lines (blank lines allowed) with
    integer or plain-word values, and ``key:`` lines followed by ``- <integer>`` items, as
    ``yaml.safe_load`` reads it; None for anything else (comments, quotes, flow lists, floats,
    repeated keys, a key without a value or items, a word YAML reads as a boolean or null), which
    then goes to the YAML parser."""
    out: dict[str, int | str | list[int]] = {}
    items: list[int] | None = None  # the list of the last ``key:`` line, while items follow
    for line in text.split("\n"):
        if not line:
            continue
        if items is not None:
            item = _FLAT_ITEM.fullmatch(line)
            if item is not None:
                items.append(int(item.group(1)))
                continue
            if not items:
                return None  # ``key:`` alone is null in YAML
            items = None
        m = _FLAT_LINE.fullmatch(line)
        if m is None:
            return None
        key, value = m.group(1), m.group(2)
        if key in out or key.lower() in _YAML_WORDS:
            return None
        if value is None:
            out[key] = items = []
        elif value.lower() in _YAML_WORDS:
            return None
        else:
            out[key] = int(value) if value[0] == "-" or value[0].isdigit() else value
    if items is not None and not items:
        return None
    return out or None


def load_yaml(path: Path) -> Any:
    """A meta yaml file's value, refusing anchors and aliases (an alias tree of a few hundred bytes
    can expand to gigabytes), nesting deeper than ``MAX_YAML_DEPTH`` and files over
    ``MAX_YAML_BYTES``. The event stream is checked before anything is built. A file of plain
    ``key: value`` lines (``flat_yaml``) is read without the YAML parser (and has no anchors or
    nesting to refuse)."""
    with open(path, "rb") as fh:
        raw = fh.read(MAX_YAML_BYTES + 1)
    if len(raw) > MAX_YAML_BYTES:
        raise LimitExceeded(f"meta yaml is larger than {MAX_YAML_BYTES // 1024} KiB", file=str(path))
    text = raw.decode("utf-8")
    flat = flat_yaml(text)
    if flat is not None:
        return flat
    import yaml

    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            line = event.start_mark.line + 1 if event.start_mark is not None else 0
            raise TraceError(
                f"meta yaml uses an anchor or alias at line {line}; write the values out",
                file=str(path),
            )
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                raise LimitExceeded(f"meta yaml nests deeper than {MAX_YAML_DEPTH} levels", file=str(path))
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
    return yaml.safe_load(text)


def distributed_info(doc: dict[str, Any], source: str) -> dict[str, Any]:
    """A Kineto trace's ``distributedInfo`` with the fields the reader uses type-checked:
    ``rank`` / ``world_size`` integers (not booleans) when present, ``pg_config`` a list of
    objects whose ``ranks`` is a list of integers."""
    dinfo = doc.get("distributedInfo")
    if dinfo is None:
        return {}
    if not isinstance(dinfo, dict):
        raise TraceError(f"distributedInfo is {short(dinfo)}, not an object", file=source)
    out = dict(dinfo)
    for key in ("rank", "world_size"):
        v = dinfo.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 2**31):
            raise TraceError(f"distributedInfo.{key} is {short(v)}, not a rank number", file=source)
    pgs = dinfo.get("pg_config")
    if pgs is None:
        out["pg_config"] = []
        return out
    if not isinstance(pgs, list):
        raise TraceError(f"distributedInfo.pg_config is {short(pgs)}, not a list of groups", file=source)
    for i, g in enumerate(pgs):
        if not isinstance(g, dict):
            continue
        ranks = g.get("ranks")
        if ranks is not None and (
            not isinstance(ranks, list)
            or not all(isinstance(r, int) and not isinstance(r, bool) and 0 <= r < 2**31 for r in ranks)
        ):
            raise TraceError(
                f"distributedInfo.pg_config[{i}].ranks is {short(ranks)}, not a list of rank numbers",
                file=source,
            )
        desc = g.get("pg_desc")
        if desc is not None and not isinstance(desc, str):
            raise TraceError(
                f"distributedInfo.pg_config[{i}].pg_desc is {short(desc)}, not a string", file=source
            )
    return out


# -- whole-trace checks -----------------------------------------------------------------------------


def _codes(*names: str) -> npt.NDArray[np.int64]:
    from diagnosers.model import OPTYPE_CODE

    return np.array([OPTYPE_CODE[n] for n in names], dtype=np.int64)


def _has_type(optype: npt.NDArray[np.integer[Any]], codes: npt.NDArray[np.int64]) -> bool:
    """Whether any op has one of the op-type ``codes`` (``np.isin(...).any()``, by counting)."""
    if len(optype) == 0:
        return False
    present = np.bincount(optype, minlength=int(codes.max(initial=0)) + 1) > 0
    return bool(present[codes].any())


def pipeline_problem(trace: Any) -> str | None:
    """Why a trace can never be analysed, or None: a pipeline job (pp > 1) without a single
    point-to-point op has no link between its stages, so every dependency model fails on it."""
    from diagnosers.model import P2P_OPTYPES

    if trace.meta.pp > 1 and not _has_type(trace.ops.optype, _codes(*P2P_OPTYPES)):
        return (
            f"the job has pp={trace.meta.pp} pipeline stages but the trace holds no point-to-point op "
            "(forward/backward send or recv), so its stages cannot be linked and no what-if analysis "
            "is possible; trace the P2P ops, or read it with pp=1 if the job has no pipeline"
        )
    return None


def common_keys(
    a: npt.NDArray[np.int64], b: npt.NDArray[np.int64], space: int, *, ordered: bool = True
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The pairs ``(i_a, i_b)`` with ``a[i_a] == b[i_b]``, one per common key: the indices of
    ``np.intersect1d(a, b, return_indices=True)``, in its order (by key) when ``ordered``, else in
    the order of ``b``. Keys in ``[0, space)`` with a space at most 8 times the keys, each key once
    per array (one send and one recv per (step, worker, seq id): the reader refuses duplicate seq
    ids), take one int32 lookup table instead of sorting both arrays; repeated keys and anything
    else take ``intersect1d``."""
    small = space <= 8 * (len(a) + len(b)) + 1024 and len(a) < 2**31
    if small and len(a) and len(b) and _in_range(a, b, space):
        table = np.full(space, -1, dtype=np.int32)
        table[a] = np.arange(len(a), dtype=np.int32)
        hit = table[b]
        i_b = np.flatnonzero(hit >= 0)
        i_a = hit[i_b].astype(np.int64)
        # each key once in ``a`` (no row's slot taken by a repeat) and once among the matched ``b``
        once = np.array_equal(table[a], np.arange(len(a))) and np.bincount(i_a, minlength=1).max() <= 1
        if once:
            if ordered:
                by_key = np.argsort(b[i_b], kind="stable")
                i_a, i_b = i_a[by_key], i_b[by_key]
            return i_a, i_b
    _, i_a, i_b = np.intersect1d(a, b, assume_unique=False, return_indices=True)
    return i_a, i_b


def _in_range(a: npt.NDArray[np.int64], b: npt.NDArray[np.int64], space: int) -> bool:
    return min(int(a.min()), int(b.min())) >= 0 and max(int(a.max()), int(b.max())) < space


_CAUSALITY_PROBE = 1 << 18  # rows of the trace's head looked at before all of it


def causality_note(trace: Any) -> str | None:
    """A note when every matched P2P pair runs backwards in time: each recv ends before its send
    starts. A send on stage s and a recv on its neighbour are matched by (step, dp rank, seq id).
    That only happens when the ranks' clocks are not aligned (or the ops are mislabelled), and
    cross-stage waits computed from such times are not to be trusted.

    One pair that does not run backwards rules the note out, so the pairs among the first rows of
    the trace are looked at first (a key names one pair in any set of rows, the reader having
    refused repeated seq ids); only when they are all backwards, or there are none, are all rows
    matched."""
    ops, pp = trace.ops, trace.meta.pp
    if pp < 2 or len(ops.optype) == 0:
        return None
    if len(ops.optype) > _CAUSALITY_PROBE:
        matched, backwards = _p2p_pairs(trace, _CAUSALITY_PROBE)
        if backwards < matched:
            return None
    matched, backwards = _p2p_pairs(trace, len(ops.optype))
    if matched and backwards == matched:
        return (
            f"causality violated: in all {matched} matched send/recv pairs the recv ends before its "
            "send starts; the ranks' clocks are probably not aligned (or sends and recvs are "
            "swapped), so cross-stage waits from these times are unreliable"
        )
    return None


def _p2p_pairs(trace: Any, rows: int) -> tuple[int, int]:
    """(matched send/recv pairs, pairs whose recv ends before its send starts) among the first
    ``rows`` rows of the trace (see ``causality_note``)."""
    ops, pp = trace.ops, trace.meta.pp
    code = ops.optype[:rows]
    step = ops.step[:rows]
    # a step's index among the steps: its offset from the first when the ids are dense enough
    # (no sort of every row), else its rank
    first, last = int(step.min()), int(step.max())
    if last - first < len(step):
        n_steps = last - first + 1

        def step_of(idx: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
            return step[idx].astype(np.int64) - first
    else:
        seen, inverse = np.unique(step, return_inverse=True)
        n_steps, ranks = len(seen), inverse.reshape(-1).astype(np.int64)

        def step_of(idx: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
            return ranks[idx]

    seq_span = int(ops.seq_id[:rows].max()) + 2
    matched = backwards = 0
    for send, recv, shift in (("forward-send", "forward-recv", 1), ("backward-send", "backward-recv", -1)):
        s = np.flatnonzero(code == int(_codes(send)[0]))
        r = np.flatnonzero(code == int(_codes(recv)[0]))
        if not len(s) or not len(r):
            continue

        def key(idx: npt.NDArray[np.int64], stage: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
            worker = ops.dp_rank[idx].astype(np.int64) * (pp + 2) + stage
            return (step_of(idx) * (trace.meta.dp * (pp + 2)) + worker) * seq_span + ops.seq_id[idx]

        ks = key(s, ops.stage[s].astype(np.int64) + shift)
        kr = key(r, ops.stage[r].astype(np.int64))
        space = n_steps * trace.meta.dp * (pp + 2) * seq_span
        i_s, i_r = common_keys(ks, kr, space, ordered=False)  # only counted: any order
        if not len(i_s):
            continue
        si, ri = s[i_s], r[i_r]
        matched += len(si)
        backwards += int(np.sum(ops.start_ts[ri] + ops.duration[ri] < ops.start_ts[si]))
    return matched, backwards
