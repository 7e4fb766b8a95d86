"""Reader for the what-if study artifact's schema: parquet, CSV or JSON Lines, optionally gzipped.

One row per op with the columns ``dp_rank, stage, rank, step, optype, start_ts, duration`` and
optionally ``seq_id, mc, gmc, mb_id`` (docs/FORMAT.md). Job metadata comes from the meta yaml
(``--meta``, a ``.yaml`` among the paths, or ``meta-<name>.yaml`` / ``meta.yaml`` beside a
``trace-<name>.*`` file), from the ``ReadOptions`` keys, or failing both from the data (dp and pp
as the largest rank index + 1). Several files are concatenated (e.g. one per rank or per step).
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt

from diagnosers.model import COLUMNS, JobMeta, Trace, TraceError
from diagnosers.readers import ReadOptions, read_failure, validate
from diagnosers.readers.errors import short
from diagnosers.readers.normalize import OPTIONAL_COLUMNS, REQUIRED_COLUMNS, meta_from_data, normalize

FORMAT_NAMES: tuple[str, ...] = ("artifact", "parquet", "csv", "jsonl")

_PARQUET_MAGIC = b"PAR1"


def _kind_of(path: Path, head: bytes) -> str:
    """``parquet``, ``jsonl`` or ``csv`` from the file's first bytes."""
    if head.startswith(_PARQUET_MAGIC):
        return "parquet"
    if head.lstrip().startswith(b"{"):
        return "jsonl"
    return "csv"


def sniff(path: Path, head: bytes) -> bool:
    """Parquet, or a CSV / JSON Lines whose first record names ``optype`` (and is not a job line)."""
    if head.startswith(_PARQUET_MAGIC):
        return True
    first = head.lstrip().split(b"\n", 1)[0]
    if first.startswith(b"{"):
        return b'"optype"' in first and b'"job"' not in first
    return b"optype" in first and b"," in first and b"dp_rank" in first


def open_stream(path: Path) -> BinaryIO:
    """A binary file object, transparently gunzipped."""
    try:
        with open(path, "rb") as fh:
            magic = fh.read(2)
        if magic == b"\x1f\x8b":
            return validate.open_gzip(path)
        return open(path, "rb")
    except OSError as exc:
        raise TraceError(read_failure(exc), file=str(path)) from exc


def _json_line_number(source: str, record: int, skip: int) -> int | None:
    """The 1-based line of the ``record``-th JSON record (0-based, blank lines not counted, after
    ``skip`` leading records) in a file: pyarrow names records, a user's editor names lines."""
    try:
        with open_stream(Path(source)) as fh:
            seen = -skip
            for lineno, line in enumerate(fh, 1):
                if line.strip():
                    if seen == record:
                        return lineno
                    seen += 1
    except (OSError, EOFError, TraceError):
        return None
    return None


def _csv_short_line(source: str) -> int | None:
    """The 1-based line of the first CSV row whose field count differs from the header's
    (pyarrow quotes the row but not its line)."""
    import csv

    try:
        with open_stream(Path(source)) as fh:
            reader = csv.reader(io.TextIOWrapper(fh, encoding="utf-8", errors="replace"))
            width = len(next(reader, []))
            for row in reader:
                if row and len(row) != width:
                    return reader.line_num
    except (OSError, EOFError, csv.Error, TraceError):
        return None
    return None


def _arrow_input(stream: BinaryIO) -> Any:
    """What pyarrow reads ``stream`` from, from its current position: a plain file memory-mapped
    (no copy), anything else (a counted gunzip stream) read here into one buffer.

    Arrow's CSV and JSON readers pull blocks on a read-ahead thread of their own. Handed a Python
    file they take the GIL on that thread; when a read fails (a budget refusal, bad gzip) the
    read-ahead can still be running at interpreter exit, where taking the GIL ends the thread and
    aborts the process ("terminate called without an active exception"). Reading in the calling
    thread keeps every Python call, and every refusal, on this side.
    """
    import pyarrow as pa

    if isinstance(stream, io.BufferedReader) and isinstance(stream.raw, io.FileIO):
        mapped = pa.memory_map(stream.name)
        mapped.seek(stream.tell())
        return mapped
    return pa.BufferReader(stream.read())


def table_from_stream(
    stream: BinaryIO, kind: str, source: str, *, typed_json: bool = False, skip_records: int = 0
) -> Any:
    """A pyarrow Table from a parquet, CSV or JSON Lines stream (read from its current position).

    ``typed_json`` parses JSON Lines with the op-table column types given (the native format
    promises them), which skips type inference; other fields are still inferred.
    ``skip_records`` is how many JSON records precede the stream's position (the native job
    line), so a parse error can name the file's line.
    """
    import pyarrow as pa

    try:
        if kind == "parquet":
            import pyarrow.parquet as pq

            # parquet needs random access; ParquetFile reads without the dataset layer (cheaper to
            # import for small traces). A plain file is memory-mapped (no copy of its bytes); a
            # gzipped one is inflated into memory first. The footer is checked before any row.
            pf = pq.ParquetFile(_arrow_input(stream))
            validate.check_parquet(pf.metadata, source)
            return pf.read()
        if kind == "jsonl":
            import pyarrow.json as pj

            if typed_json:
                schema = pa.schema(
                    [
                        ("dp_rank", pa.int64()),
                        ("stage", pa.int64()),
                        ("rank", pa.int64()),
                        ("step", pa.int64()),
                        ("optype", pa.string()),
                        ("start_ts", pa.float64()),
                        ("duration", pa.float64()),
                        ("seq_id", pa.int64()),
                        ("mc", pa.int64()),
                        ("gmc", pa.int64()),
                        ("mb_id", pa.int64()),
                    ]
                )
                table = pj.read_json(
                    _arrow_input(stream), parse_options=pj.ParseOptions(explicit_schema=schema)
                )
            else:
                table = pj.read_json(_arrow_input(stream))
        else:
            import pyarrow.csv as pcsv

            table = pcsv.read_csv(_arrow_input(stream))
        validate.take_ops(table.num_rows, source)
        return table
    except (OSError, EOFError) as exc:
        raise TraceError(read_failure(exc), file=source) from exc
    except pa.ArrowException as exc:
        message = str(exc)
        row = re.search(r" in row (\d+)$", message)
        if kind == "jsonl" and row:
            line = _json_line_number(source, int(row.group(1)), skip_records)
            if line is not None:
                message = f"{message[: row.start()]} on line {line}"
        elif kind == "csv" and "columns, got" in message:
            line = _csv_short_line(source)
            if line is not None:
                message = f"{message} (line {line})"
        raise TraceError(f"cannot parse as {kind}: {message}", file=source) from exc


def columns_from_table(table: Any, source: str) -> tuple[dict[str, npt.NDArray[Any]], list[str]]:
    """Numpy columns from a pyarrow Table; ``optype`` comes back as indices into the returned names.

    Nulls in optional columns become -1; nulls elsewhere are reported by ``normalize``.
    """
    import pyarrow as pa

    validate.check_table(table, source)
    # a column with no value at all is absent (a typed JSON read creates every schema column)
    names = {
        c for c in table.column_names if table.num_rows == 0 or table.column(c).null_count < table.num_rows
    }
    missing = [c for c in REQUIRED_COLUMNS if c not in names]
    if missing:
        raise TraceError(f"missing columns: {', '.join(missing)}", file=source)
    cols: dict[str, npt.NDArray[Any]] = {}
    for c in (*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS):
        if c not in names:
            continue
        col = table.column(c)
        if c == "optype":
            col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
            if not pa.types.is_dictionary(col.type):
                if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
                    import pyarrow.compute as pc

                    col = pc.cast(col, pa.string())
                col = col.dictionary_encode()
            if col.null_count:
                raise TraceError("optype is empty in some rows", file=source)
            cols[c] = col.indices.to_numpy(zero_copy_only=False)  # int8 codes as stored
            categories = [str(x) for x in col.dictionary.to_pylist()]
            continue
        if pa.types.is_dictionary(col.type):
            import pyarrow.compute as pc

            col = pc.cast(col, col.type.value_type)
        widened = _widened(col, COLUMNS[c])
        if widened is not None:
            cols[c] = widened
            continue
        arr = col.to_numpy()  # nulls come back as NaN (numeric) or None (object)
        if c in OPTIONAL_COLUMNS and col.null_count:
            null = np.asarray([x is None for x in arr]) if arr.dtype == object else np.isnan(arr)
            arr = np.where(null, -1, arr)
        cols[c] = arr
    return cols, categories


def _widened(col: Any, dtype: Any) -> npt.NDArray[Any] | None:
    """A numeric column without nulls stored in a type that ``dtype`` (the op table's type of the
    column) holds exactly (int8 -> int32, float32 -> float64, ...), converted into one array of
    ``dtype`` chunk by chunk: one copy, where ``to_numpy`` would concatenate the row groups and the
    reader then widen the result. None for any other column (it takes the general path)."""
    import pyarrow as pa

    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    typ = col.type
    if col.null_count or not (pa.types.is_integer(typ) or pa.types.is_floating(typ)):
        return None
    stored = np.dtype(typ.to_pandas_dtype())
    if stored == np.dtype(dtype) or not np.can_cast(stored, dtype, casting="safe"):
        return None  # already the op table's type (to_numpy shares pyarrow's buffer), or narrowing
    out = np.empty(len(col), dtype=dtype)
    at = 0
    for chunk in chunks:
        out[at : at + len(chunk)] = chunk.to_numpy(zero_copy_only=True)
        at += len(chunk)
    return out


def _release_arrow_memory() -> None:
    """Hand pyarrow's freed buffers back to the system. Its allocator keeps them for reuse (the
    decoded table, ~30 bytes per op), but nothing else reads with it, and ``normalize`` (whose
    temporaries come right after the read) would otherwise run on top of them."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()


def read_columns(
    paths: Sequence[Path], kind: str | None = None
) -> tuple[dict[str, npt.NDArray[Any]], list[str]]:
    """Concatenated columns of several artifact-schema files, with one shared optype name list."""
    all_cols: list[dict[str, npt.NDArray[Any]]] = []
    cats: list[str] = []
    cat_index: dict[str, int] = {}
    for path in paths:
        with open_stream(path) as stream:
            found = _kind_of(path, stream.peek(8)[:8] if hasattr(stream, "peek") else b"")
            if kind is not None and kind != found:
                # the parser of the forced kind would fail with a cryptic message
                raise TraceError(
                    f"cannot parse as {kind} (--format {kind}): the file looks like {found}; "
                    f"drop --format or pass --format {found}",
                    file=str(path),
                )
            table = table_from_stream(stream, kind or found, str(path))
        cols, local = columns_from_table(table, str(path))
        del table
        _release_arrow_memory()
        remap = np.empty(len(local), dtype=np.int16)
        for i, name in enumerate(local):
            if name not in cat_index:
                cat_index[name] = len(cats)
                cats.append(name)
            remap[i] = cat_index[name]
        if len(local) and not np.array_equal(remap, np.arange(len(local))):
            cols["optype"] = remap[cols["optype"]]  # this file's names into the shared list
        all_cols.append(cols)
    if len(all_cols) == 1:
        return all_cols[0], cats
    common = set.intersection(*(set(c) for c in all_cols))
    return {c: np.concatenate([cols[c] for cols in all_cols]) for c in common}, cats


# The meta yaml's keys: the artifact's, ours (gpus_per_host, layers_per_stage), and JobMeta's names.
META_KEYS: frozenset[str] = frozenset(
    {"trial_name", "run_id", "dp_size", "dsp_size", "cp_size", "pp_size", "tp_size", "vpp_size",
     "world_size", "gpus_per_host", "layers_per_stage", "layers_per_chunk", "dp", "pp", "tp", "cp", "vpp"}
)


def load_meta_yaml(path: Path) -> dict[str, Any]:
    """The keys of a meta yaml file (the artifact's ``meta-*.yaml``). An unknown key is an error
    (a typo such as ``pp_szie`` would otherwise leave the size to be guessed from the data)."""
    try:
        data = validate.load_yaml(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"cannot read meta yaml: {exc}", file=str(path)) from exc
    except Exception as exc:
        import yaml  # already imported by load_yaml when it parsed the file

        if not isinstance(exc, yaml.YAMLError):
            raise
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise TraceError(f"meta yaml is not valid YAML{where}: {problem}", file=str(path)) from exc
    if not isinstance(data, dict):
        raise TraceError("meta yaml is not a mapping of keys to values", file=str(path))
    unknown = sorted(str(k) for k in data if k not in META_KEYS)
    if unknown:
        import difflib

        hints = [h for k in unknown for h in difflib.get_close_matches(k, META_KEYS, n=1)]
        hint = f" (did you mean {', '.join(hints)}?)" if hints else ""
        raise TraceError(
            f"unknown meta key(s) {', '.join(unknown)}{hint}; known keys: {', '.join(sorted(META_KEYS))}",
            file=str(path),
        )
    return data


# Meta yaml key -> ReadOptions field, for readers whose layout logic works from the options (Kineto).
_YAML_OPTION = {
    "dp_size": "dp", "pp_size": "pp", "tp_size": "tp", "dsp_size": "cp", "cp_size": "cp",
    "vpp_size": "vpp", "dp": "dp", "pp": "pp", "tp": "tp", "cp": "cp", "vpp": "vpp",
    "gpus_per_host": "gpus_per_host", "layers_per_stage": "layers_per_stage",
}


def options_with_meta(options: ReadOptions) -> ReadOptions:
    """``options`` with the meta yaml's job keys filled in where the options leave them open
    (command-line keys win, as for the other readers). Sizes must be positive integers."""
    import dataclasses

    if options.meta_path is None:
        return options
    path = options.meta_path
    fill: dict[str, Any] = {}
    for key, value in load_meta_yaml(path).items():
        field = _YAML_OPTION.get(key)
        if field is None or getattr(options, field) is not None:
            continue
        values = value if field == "layers_per_stage" else [value]
        if not isinstance(values, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values
        ):
            want = "a list of positive integers" if field == "layers_per_stage" else "a positive integer"
            raise TraceError(f"meta key {key} must be {want}, got {short(value)}", file=str(path))
        fill[field] = value
    return dataclasses.replace(options, **fill)


def meta_problem(exc: ValueError) -> str:
    """A job-model validation error on one line: ``dp: Input should be ... (got 0)``."""
    from pydantic import ValidationError

    if not isinstance(exc, ValidationError):
        return str(exc)
    parts = []
    for err in exc.errors():
        field = ".".join(str(x) for x in err["loc"])
        msg = str(err["msg"]).removeprefix("Value error, ")
        got = f" (got {short(err['input'])})" if field else ""
        parts.append(f"{field}: {msg}{got}" if field else msg)
    return "; ".join(parts)


def find_meta_beside(path: Path) -> Path | None:
    """``meta-<name>.yaml`` for ``trace-<name>.<ext>``, or ``meta.yaml``, in the same folder."""
    stem = path.name.split(".", 1)[0]
    candidates = []
    if stem.startswith("trace-"):
        candidates.append(path.with_name(f"meta-{stem[len('trace-') :]}.yaml"))
    candidates.append(path.with_name("meta.yaml"))
    return next((c for c in candidates if c.is_file()), None)


_SIZE_KEYS = frozenset(
    {"dp", "pp", "tp", "cp", "vpp", "dp_size", "pp_size", "tp_size", "dsp_size", "cp_size", "vpp_size",
     "gpus_per_host"}
)


def _blames_base(exc: ValueError, base: dict[str, Any]) -> bool:
    """Whether a job-model error is about a key the meta file (or job line) gave: only then is
    that file named (a size taken from the data or an option is not the file's fault)."""
    from pydantic import ValidationError

    if not isinstance(exc, ValidationError):
        # JobMeta's own checks across fields (layer lists against pp / vpp) raise a plain
        # ValueError when every value has its type; like pydantic's model-level errors they blame
        # the keys given
        return True
    given = {k.removesuffix("_size") for k in base} | {"cp" for k in base if k == "dsp_size"} | set(base)
    fields = {str(e["loc"][0]) for e in exc.errors() if e["loc"]}
    layers = any(k in base for k in ("layers_per_stage", "layers_per_chunk"))
    return not fields or bool(fields & given) or layers


def build_meta(
    columns: dict[str, npt.NDArray[Any]],
    base: dict[str, Any],
    options: ReadOptions,
    fmt: str,
    meta_file: Path | None = None,
) -> JobMeta:
    """Meta from yaml/job keys in ``base``, the explicit options over them, the data for the rest.

    ``meta_file`` (where ``base`` came from) is named in the error when the keys are invalid."""
    merged = dict(base)
    merged.update(options.overrides())
    for key in _SIZE_KEYS & set(merged):
        # bounded before anything is sized by them; an option's problem does not name the file
        validate.check_size(key, merged[key], str(meta_file) if meta_file and key in base else None)
    try:
        meta = meta_from_data(columns, merged)
    except ValueError as exc:
        named = meta_file if meta_file and _blames_base(exc, base) else None
        where = str(named) if named else None
        raise TraceError(f"bad job metadata: {meta_problem(exc)}", file=where) from exc
    meta.source_format = fmt
    return meta


def read(paths: list[Path], options: ReadOptions) -> Trace:
    """Read artifact-schema files (see the module docstring) into a validated ``Trace``."""
    kind = options.format if options.format in ("parquet", "csv", "jsonl") else None
    cols, cats = read_columns(paths, kind)
    meta_path = options.meta_path or find_meta_beside(paths[0])
    base = load_meta_yaml(meta_path) if meta_path else {}
    meta = build_meta(cols, base, options, "artifact", meta_path)
    source = str(paths[0]) if len(paths) == 1 else f"{paths[0]} (+{len(paths) - 1} files)"
    trace = normalize(cols, meta, source=source, optype_categories=cats)
    del cols
    _release_arrow_memory()  # the columns normalize copied
    if meta_path is None and not options.overrides():
        trace.notes.append(f"no meta yaml: took dp={meta.dp}, pp={meta.pp} from the data")
    return trace
