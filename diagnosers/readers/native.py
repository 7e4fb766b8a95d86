"""Reader for Straggler Lens's native format: JSON Lines with a job header.

The first line is ``{"job": {...}}`` holding the artifact's meta keys (``trial_name, run_id,
dp_size, dsp_size, pp_size, tp_size, vpp_size, world_size``) plus ``gpus_per_host`` and optionally
``layers_per_stage``; every following line is one op with the artifact's field names and ``optype``
as a string (docs/FORMAT.md, docs/native-format.schema.json). Optionally gzipped. Several files
are concatenated; their job headers must agree.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from diagnosers.model import Trace, TraceError
from diagnosers.readers import ReadOptions
from diagnosers.readers.artifact import (
    build_meta,
    columns_from_table,
    load_meta_yaml,
    open_stream,
    table_from_stream,
)
from diagnosers.readers.normalize import normalize

FORMAT_NAMES: tuple[str, ...] = ("native",)

_JOB_KEYS = frozenset(
    {
        "trial_name",
        "run_id",
        "dp_size",
        "dsp_size",
        "cp_size",
        "pp_size",
        "tp_size",
        "vpp_size",
        "world_size",
        "gpus_per_host",
        "layers_per_stage",
        "layers_per_chunk",
    }
)


def sniff(path: Path, head: bytes) -> bool:
    """A JSON object whose first key is ``job`` on the first line."""
    first = head.lstrip().split(b"\n", 1)[0].strip()
    if not first.startswith(b"{"):
        return False
    try:
        obj = json.loads(first)
    except ValueError:
        return first.replace(b" ", b"").startswith(b'{"job":')
    return isinstance(obj, dict) and "job" in obj


def _read_header(first: bytes, source: str) -> dict[str, Any]:
    try:
        header = json.loads(first)
    except ValueError as exc:
        raise TraceError(f"first line is not JSON: {exc}", file=source) from exc
    if not isinstance(header, dict) or not isinstance(header.get("job"), dict):
        raise TraceError('first line must be {"job": {...}}', file=source)
    job: dict[str, Any] = header["job"]
    unknown = sorted(set(job) - _JOB_KEYS)
    if unknown:
        raise TraceError(f"unknown job keys: {', '.join(unknown)}", file=source)
    return job


def read(paths: list[Path], options: ReadOptions) -> Trace:
    """Read native JSON Lines files (see the module docstring) into a validated ``Trace``."""
    job: dict[str, Any] | None = None
    parts: list[dict[str, npt.NDArray[Any]]] = []
    cat_index: dict[str, int] = {}
    for path in paths:
        with open_stream(path) as stream:
            first = stream.readline()
            while first and not first.strip():
                first = stream.readline()
            this_job = _read_header(first, str(path))
            if job is None:
                job = this_job
            elif this_job != job:
                raise TraceError("job header differs from the first file's", file=str(path))
            rest = stream.peek(1) if hasattr(stream, "peek") else b"x"
            if not rest:
                continue
            table = table_from_stream(stream, "jsonl", str(path), typed_json=True, skip_records=1)
        if table.num_rows == 0:
            continue
        cols, local = columns_from_table(table, str(path))
        remap = np.array([cat_index.setdefault(n, len(cat_index)) for n in local], dtype=np.int64)
        cols["optype"] = remap[cols["optype"]] if len(local) else cols["optype"]
        parts.append(cols)
    if not parts:
        raise TraceError("no op lines after the job header", file=str(paths[0]))
    common = set.intersection(*(set(p) for p in parts))
    cols = {c: np.concatenate([p[c] for p in parts]) for c in common}
    base = dict(job or {})
    if options.meta_path is not None:
        base.update(load_meta_yaml(options.meta_path))
    meta = build_meta(cols, base, options, "native", options.meta_path or paths[0])
    source = str(paths[0]) if len(paths) == 1 else f"{paths[0]} (+{len(paths) - 1} files)"
    return normalize(cols, meta, source=source, optype_categories=list(cat_index))
