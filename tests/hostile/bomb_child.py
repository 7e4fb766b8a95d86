"""Run one memory bomb through the server's upload path in this process; print the outcome.

``python bomb_child.py CASE DATA_DIR``: builds the bomb here (so its peak RSS is this process's),
stages it as an upload would (``write_bytes``: the outer gzip layer inflated under the upload
budget), parses it with ``Lens.ingest`` (no executor: the reader runs in this process) and prints
``STATUS CODE MESSAGE``. Settings are the server's defaults unless the case says otherwise.
"""

from __future__ import annotations

import gzip
import io
import sys
from pathlib import Path

from server.core.errors import ApiError
from server.core.service import Lens
from server.core.settings import Settings
from server.core.staging import UploadBudget, write_bytes
from server.core.store import Store

HEADER = b"dp_rank,stage,rank,step,optype,start_ts,duration\n"
ROW = b"0,0,0,0,forward-compute,0.0,0.1\n"


def yaml_alias() -> tuple[list[tuple[str, bytes]], dict[str, object], dict[str, object]]:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    return [("t.csv", HEADER + ROW), ("meta.yaml", "\n".join(lines).encode())], {}, {}


def nested_gzip() -> tuple[list[tuple[str, bytes]], dict[str, object], dict[str, object]]:
    member = gzip.compress(b"\n" * (64 << 20), 9)
    inner = gzip.compress(HEADER + ROW) + member * 64  # 4 GiB once both layers are inflated
    return (
        [("t.csv.gz", gzip.compress(inner, 1))],
        {},
        {"max_upload_bytes": 16 << 20, "max_decompressed_bytes": 64 << 20},
    )


def rle_parquet() -> tuple[list[tuple[str, bytes]], dict[str, object], dict[str, object]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = 1 << 22  # the footer is all the server reads: null columns keep the writing fast
    block = pa.table(
        {c: pa.nulls(n, pa.int64()) for c in ("dp_rank", "stage", "rank", "step")}
        | {
            "optype": pa.nulls(n, pa.string()),
            "start_ts": pa.nulls(n, pa.float64()),
            "duration": pa.nulls(n, pa.float64()),
        }
    )
    buf = io.BytesIO()
    with pq.ParquetWriter(buf, block.schema, compression="zstd") as w:
        for _ in range(6):  # 24 Mi rows, beyond the default 20M-op bound
            w.write_table(block)
    return [("t.parquet", buf.getvalue())], {}, {}


def kineto_json() -> tuple[list[tuple[str, bytes]], dict[str, object], dict[str, object]]:
    member = gzip.compress(b" " * (64 << 20), 9)
    inner = gzip.compress(b'{"schemaVersion": 1, "traceEvents": [') + member * 2  # 128 MiB of JSON
    # the default 512 MiB bound takes 18 s to reach here; 64 MiB shows the same refusal faster
    return [("rank0.json.gz", gzip.compress(inner, 1))], {}, {"max_json_bytes": 64 << 20}


def layout() -> tuple[list[tuple[str, bytes]], dict[str, object], dict[str, object]]:
    return [("t.csv", HEADER + ROW * 4)], {"dp": 60_000, "pp": 60_000}, {}


def main() -> None:
    case, data = sys.argv[1], Path(sys.argv[2])
    files, options, overrides = globals()[case]()
    settings = Settings(data_dir=data, **overrides)  # type: ignore[arg-type]
    lens = Lens(settings, Store(data).open())
    staging = lens.store.staging_dir()
    budget = UploadBudget(settings.max_upload_bytes, settings.max_decompressed_bytes)
    try:
        staged = [write_bytes(staging, name, blob, budget) for name, blob in files]
        del files
        lens.ingest(staging, staged, options, case)
        print("201 created accepted")
    except ApiError as exc:
        print(exc.status, exc.code, exc.message[:300])


if __name__ == "__main__":
    main()
