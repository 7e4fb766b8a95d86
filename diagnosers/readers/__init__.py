"""Trace readers, one module per input format, chosen by name or by sniffing the files.

A reader module ``diagnosers.readers.<name>`` provides:

- ``FORMAT_NAMES: tuple[str, ...]`` — the ``--format`` values it answers to;
- ``sniff(path: Path, head: bytes) -> bool`` — whether a file looks like its format (``head`` is
  the first 64 KiB, already gunzipped);
- ``read(paths: list[Path], options: ReadOptions) -> Trace`` — parse, normalise and validate.

Modules listed in ``READER_MODULES`` that are not present are skipped, so formats can land one by
one. Every reader raises :class:`diagnosers.model.TraceError` naming file, rank, step and op.
"""

from __future__ import annotations

import gzip
import importlib
import types
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from diagnosers import interleaved
from diagnosers.model import OPTYPE_CODE, Trace, TraceError
from diagnosers.readers import validate
from diagnosers.readers.errors import as_trace_error
from diagnosers.readers.validate import ReadLimits

# Sniffing order matters: the more specific formats first.
READER_MODULES: tuple[str, ...] = ("native", "artifact", "ndtimeline", "kineto")

SNIFF_BYTES = 64 * 1024


@dataclass
class ReadOptions:
    """What the caller knows beyond the files: format, meta yaml and command-line job keys."""

    format: str | None = None
    meta_path: Path | None = None
    dp: int | None = None
    pp: int | None = None
    tp: int | None = None
    cp: int | None = None
    vpp: int | None = None
    gpus_per_host: int | None = None
    layers_per_stage: list[int] | None = None
    extra: dict[str, object] = field(default_factory=dict)
    # budgets of the read (decompressed bytes, ops, parallel sizes); None = the CLI defaults
    limits: ReadLimits | None = None

    def overrides(self) -> dict[str, object]:
        """The job keys given explicitly (None values dropped), in ``JobMeta`` field names."""
        keys = ("dp", "pp", "tp", "cp", "vpp", "gpus_per_host", "layers_per_stage")
        return {k: getattr(self, k) for k in keys if getattr(self, k) is not None}


def iter_readers() -> Iterator[tuple[str, types.ModuleType]]:
    """Reader modules that are installed, in sniffing order, each imported only when reached (a
    parquet trace never pays for importing the profiler readers)."""
    for name in READER_MODULES:
        try:
            module = importlib.import_module(f"diagnosers.readers.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"diagnosers.readers.{name}":
                raise
            continue
        yield name, module


def available_readers() -> dict[str, types.ModuleType]:
    """Reader modules that are installed, by module name."""
    return dict(iter_readers())


def read_failure(exc: BaseException) -> str:
    """What went wrong reading a file, in words a user can act on (truncated gzip, binary data)."""
    if isinstance(exc, EOFError):
        return "the gzip file is truncated (it ends before its compressed stream does)"
    if isinstance(exc, gzip.BadGzipFile):
        return f"not a valid gzip file: {exc}"
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text (a binary file? check --format)"
    return f"cannot read file: {exc}"


def read_head(path: Path, size: int = SNIFF_BYTES) -> bytes:
    """The first ``size`` bytes of a file, gunzipped when it is gzip-compressed."""
    try:
        with open(path, "rb") as fh:
            magic = fh.read(2)
        if magic == b"\x1f\x8b":
            with gzip.open(path, "rb") as gz:
                return gz.read(size)
        with open(path, "rb") as fh:
            return fh.read(size)
    except (OSError, EOFError) as exc:
        raise TraceError(read_failure(exc), file=str(path)) from exc


def expand_paths(paths: Sequence[str | Path]) -> list[Path]:
    """Files named directly, files inside named directories, and glob patterns, sorted."""
    out: list[Path] = []
    for raw in paths:
        if not str(raw).strip():
            raise TraceError("an empty path was given")
        p = Path(raw)
        if any(ch in str(raw) for ch in "*?["):
            matches = sorted(Path().glob(str(raw))) if not p.is_absolute() else sorted(
                Path(p.anchor).glob(str(p.relative_to(p.anchor)))
            )
            if not matches:
                raise TraceError("glob matched no files", file=str(raw))
            out.extend(m for m in matches if m.is_file())
        elif p.is_dir():
            files = sorted(f for f in p.iterdir() if f.is_file() and not f.name.startswith("."))
            if not files:
                raise TraceError("directory holds no files", file=str(p))
            out.extend(files)
        elif p.is_file():
            out.append(p)
        else:
            raise TraceError("no such file or directory", file=str(p))
    return out


def _is_meta_file(path: Path) -> bool:
    return path.suffix.lower() in {".yaml", ".yml"}


def detect_format(paths: Sequence[Path]) -> str:
    """The module name of the first reader whose ``sniff`` accepts the first data file.

    Files no reader recognises (a LICENSE or README next to the traces) are passed over; the error
    names the first file.
    """
    first = paths[0]
    for path in paths:
        head = read_head(path)
        for name, module in iter_readers():
            if module.sniff(path, head):
                return name
    if all(not read_head(p, 1) for p in paths):
        raise TraceError("the file is empty", file=str(first))
    readers = available_readers()
    known = ", ".join(n for m in readers.values() for n in m.FORMAT_NAMES)
    raise TraceError(f"cannot tell the trace format; pass --format (one of: {known})", file=str(first))


def load_trace(paths: Sequence[str | Path], options: ReadOptions | None = None) -> Trace:
    """Read one job's trace from files, directories or globs.

    A ``.yaml``/``.yml`` among the paths is taken as the meta file unless ``options.meta_path`` is set.
    Among several files, those the chosen reader does not recognise are skipped with a note.
    """
    opts = options or ReadOptions()
    with validate.reading(opts.limits):
        try:
            return _load_trace(paths, opts)
        except (KeyboardInterrupt, SystemExit, AssertionError):
            raise
        except Exception as exc:  # RecursionError, OverflowError, ... -> one TraceError
            raise as_trace_error(exc, [str(p) for p in paths]) from exc


def _load_trace(paths: Sequence[str | Path], opts: ReadOptions) -> Trace:
    files = expand_paths(paths)
    metas = [f for f in files if _is_meta_file(f)]
    data = [f for f in files if not _is_meta_file(f)]
    if not data:
        raise TraceError("no trace files given (only meta files)")
    if metas and opts.meta_path is None:
        if len(metas) > 1:
            raise TraceError(f"several meta files given: {', '.join(str(m) for m in metas)}")
        opts.meta_path = metas[0]
    if opts.format:
        module = next(
            (m for _, m in iter_readers() if opts.format in m.FORMAT_NAMES or opts.format == m.__name__),
            None,
        )
        if module is None:
            readers = available_readers()
            known = ", ".join(n for m in readers.values() for n in m.FORMAT_NAMES)
            raise TraceError(f"unknown format {opts.format!r}; known formats: {known}")
        _check_forced_format(module, opts.format, data)
    else:
        module = importlib.import_module(f"diagnosers.readers.{detect_format(data)}")
    foreign = _foreign_files(module, data)
    data = [f for f in data if f not in foreign]
    trace: Trace = module.read(data, opts)
    trace.sources = [str(f) for f in data]
    optype = trace.ops.optype
    is_compute = (optype == OPTYPE_CODE["forward-compute"]) | (optype == OPTYPE_CODE["backward-compute"])
    trace.notes.extend(interleaved.meta_notes(trace.meta, trace.ops.mc, is_compute))
    note = validate.causality_note(trace)
    if note:
        trace.notes.append(note)
    if foreign:
        fmt = module.__name__.rsplit(".", 1)[-1]
        trace.notes.append(
            f"skipped {len(foreign)} file(s) that are not {fmt} input: {', '.join(f.name for f in foreign)}"
        )
    return trace


def _check_forced_format(module: types.ModuleType, name: str, files: Sequence[Path]) -> None:
    """A ``--format`` that recognises none of the files while another reader recognises the first
    is a mistake worth naming (the forced reader's own parse error would be cryptic)."""
    if any(module.sniff(f, read_head(f)) for f in files):
        return
    try:
        other = detect_format(files[:1])
    except TraceError:
        return  # nothing recognises it: let the forced reader say what is wrong
    if other != module.__name__.rsplit(".", 1)[-1]:
        raise TraceError(
            f"--format {name} does not match the file, which looks like {other} input; "
            f"drop --format to detect it or pass --format {other}",
            file=str(files[0]),
        )


def _foreign_files(module: types.ModuleType, files: Sequence[Path]) -> list[Path]:
    """Files among several that the chosen reader does not recognise: a README, LICENSE, run log or
    the generator's labels.json next to the traces. When it recognises none of them, none are
    dropped, so the reader's own error names what is wrong with the first one."""
    if len(files) < 2:
        return []
    foreign = [f for f in files if not module.sniff(f, read_head(f))]
    return [] if len(foreign) == len(files) else foreign
