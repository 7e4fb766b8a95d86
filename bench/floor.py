"""The physical floor of reading a trace: what any analysis of it must at least pay.

    .venv/bin/python bench/floor.py TRACE.parquet

Run as a fresh process (as ``analyze`` is): interpreter start, import numpy and pyarrow, read the
11 op-table columns of an artifact-schema parquet file with pyarrow, turn them into numpy arrays
(``optype`` as its dictionary codes) and make one vectorised pass over them: every op's end time,
and per (step, worker) the busy time (sum of durations) and the last end. Prints one JSON line
with the op count and the two checksums, so the work cannot be skipped. ``bench/speed_bench.py``
reports the engine's wall time as a ratio to this script's, measured in the same run.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pyarrow.parquet as pq

COLUMNS = (
    "dp_rank", "stage", "rank", "step", "optype", "start_ts", "duration", "seq_id", "mc", "gmc", "mb_id"
)  # fmt: skip


def main(path: str) -> None:
    table = pq.ParquetFile(path).read(columns=list(COLUMNS))
    cols = {}
    for name in COLUMNS:
        col = table.column(name).combine_chunks()
        cols[name] = col.indices.to_numpy() if name == "optype" else col.to_numpy()
    del table
    end = cols["start_ts"] + cols["duration"]
    pp = int(cols["stage"].max()) + 1
    workers = (int(cols["dp_rank"].max()) + 1) * pp
    first_step = int(cols["step"].min())
    # the file's integer columns may be narrow (int8/int16): the cell index needs 64 bits
    step, dp_rank = cols["step"].astype(np.int64), cols["dp_rank"].astype(np.int64)
    cell = (step - first_step) * workers + dp_rank * pp + cols["stage"]
    busy = np.bincount(cell, weights=cols["duration"])
    last = np.full(len(busy), -np.inf)
    np.maximum.at(last, cell, end)
    checksum = {"ops": len(end), "busy": float(busy.sum()), "last": float(last[np.isfinite(last)].sum())}
    print(json.dumps(checksum))


if __name__ == "__main__":
    main(sys.argv[1])
