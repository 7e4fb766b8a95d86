"""Writers: a ``Trace`` to the study artifact's parquet schema, its meta yaml, and native JSON Lines.

Parquet columns and types follow ``trace-*.parquet`` of the artifact exactly: ``dp_rank int8,
stage int8, rank int16, step int64, optype dictionary<string, int8>, start_ts float32,
duration float32, seq_id int32, mc int8, mb_id int8, gmc int16``. A column is widened to the next
signed integer type only when its values do not fit (e.g. ``rank`` int32 beyond 32,767 ranks,
``mb_id`` int16 beyond 127 microbatches), so any tool that reads the artifact's traces reads ours.
``-1`` marks "not applicable" in ``mc``, ``mb_id`` and ``gmc``, as in the artifact.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from diagnosers.model import OPTYPES, JobMeta, Trace

# Column -> the artifact's type; integers may widen (see module docstring).
ARTIFACT_INT_TYPES: dict[str, type[np.signedinteger[Any]]] = {
    "dp_rank": np.int8,
    "stage": np.int8,
    "rank": np.int16,
    "step": np.int64,
    "seq_id": np.int32,
    "mc": np.int8,
    "mb_id": np.int8,
    "gmc": np.int16,
}
ARTIFACT_COLUMN_ORDER: tuple[str, ...] = (
    "dp_rank", "stage", "rank", "step", "optype", "start_ts", "duration", "seq_id", "mc", "mb_id", "gmc",
)
_WIDER: tuple[type[np.signedinteger[Any]], ...] = (np.int8, np.int16, np.int32, np.int64)


def narrowest_int(values: npt.NDArray[np.integer[Any]], base: type[np.signedinteger[Any]]) -> np.dtype[Any]:
    """The artifact's type ``base``, or the first wider signed type that holds every value."""
    if len(values) == 0:
        return np.dtype(base)
    lo, hi = int(values.min()), int(values.max())
    for t in _WIDER[_WIDER.index(base):]:
        info = np.iinfo(t)
        if info.min <= lo and hi <= info.max:
            return np.dtype(t)
    return np.dtype(np.int64)


def write_parquet(trace: Trace, path: str | Path) -> Path:
    """Write the op table in the artifact's parquet schema (types above); returns the path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    ops = trace.ops
    arrays: dict[str, Any] = {}
    for name in ARTIFACT_COLUMN_ORDER:
        if name == "optype":
            present = np.unique(ops.optype)
            remap = np.full(len(OPTYPES), -1, dtype=np.int8)
            remap[present] = np.arange(len(present), dtype=np.int8)
            indices = pa.array(remap[ops.optype], type=pa.int8())
            dictionary = pa.array([OPTYPES[i] for i in present], type=pa.string())
            arrays[name] = pa.DictionaryArray.from_arrays(indices, dictionary)
        elif name in ("start_ts", "duration"):
            arrays[name] = pa.array(getattr(ops, name).astype(np.float32), type=pa.float32())
        else:
            col = getattr(ops, name)
            arrays[name] = pa.array(col.astype(narrowest_int(col, ARTIFACT_INT_TYPES[name])))
    table = pa.table(arrays)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, out, compression="snappy")
    return out


def write_meta_yaml(meta: JobMeta, path: str | Path) -> Path:
    """Write ``meta.yaml``: the artifact's meta keys plus ``gpus_per_host`` and ``layers_per_stage``."""
    import yaml

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(meta.to_artifact_yaml(), sort_keys=False), encoding="utf-8")
    return out


def write_native(trace: Trace, path: str | Path) -> Path:
    """Write native JSON Lines: ``{"job": {...}}`` then one op per line, ``optype`` as a string.

    Floats are written with 9 significant digits (sub-microsecond at step-relative times).
    """
    ops = trace.ops
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    names = [json.dumps(n) for n in OPTYPES]
    cols = [
        ops.dp_rank.tolist(), ops.stage.tolist(), ops.rank.tolist(), ops.step.tolist(),
        ops.optype.tolist(), ops.start_ts.tolist(), ops.duration.tolist(), ops.seq_id.tolist(),
        ops.mc.tolist(), ops.mb_id.tolist(), ops.gmc.tolist(),
    ]
    with open(out, "w", encoding="utf-8") as fh:
        fh.write(json.dumps({"job": trace.meta.to_artifact_yaml()}) + "\n")
        buf: list[str] = []
        for dp, st, rk, sp, ot, ts, du, sq, mc, mb, gm in zip(*cols, strict=True):
            buf.append(
                f'{{"dp_rank": {dp}, "stage": {st}, "rank": {rk}, "step": {sp}, "optype": {names[ot]}, '
                f'"start_ts": {ts:.9g}, "duration": {du:.9g}, "seq_id": {sq}, "mc": {mc}, '
                f'"mb_id": {mb}, "gmc": {gm}}}\n'
            )
            if len(buf) >= 65536:
                fh.write("".join(buf))
                buf.clear()
        fh.write("".join(buf))
    return out
