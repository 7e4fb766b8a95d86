"""Arrow never reads a Python file object on its own threads.

Arrow's CSV and JSON readers pull blocks on a read-ahead thread. When that thread reads a Python
stream and the read is refused (a decompression budget, bad gzip), the read-ahead can outlive the
call and abort the interpreter at exit (SIGABRT, "terminate called without an active exception").
The readers hand Arrow a memory map or an in-memory buffer instead; these tests pin that, and that a
refusal mid-stream still comes back as the budget's error, naming the file.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pyarrow as pa
import pytest

from diagnosers.model import TraceError
from diagnosers.readers import validate
from diagnosers.readers.artifact import _arrow_input, open_stream, table_from_stream

CSV = b"dp_rank,stage,rank,step,optype,start_ts,duration\n" + b"0,0,0,0,forward-compute,0.0,0.1\n" * 1000


@pytest.mark.parametrize("gz", [False, True])
def test_arrow_gets_a_native_file(gz: bool, tmp_path: Path) -> None:
    path = tmp_path / ("t.csv.gz" if gz else "t.csv")
    path.write_bytes(gzip.compress(CSV) if gz else CSV)
    with open_stream(path) as fh:
        fh.read(10)  # a reader that consumed a header line hands over from its position
        src = _arrow_input(fh)
        assert isinstance(src, pa.NativeFile) and not isinstance(src, pa.PythonFile)
        assert src.read() == CSV[10:]


def test_a_budget_refusal_mid_stream_stays_in_the_calling_thread(tmp_path: Path) -> None:
    path = tmp_path / "t.csv.gz"
    path.write_bytes(gzip.compress(CSV * 200))
    limits = validate.ReadLimits(max_decompressed_bytes=len(CSV) * 50)
    refused = pytest.raises(TraceError, match=r"every compression layer counts.*t\.csv\.gz")
    with validate.reading(limits), open_stream(path) as fh, refused:
        table_from_stream(fh, "csv", str(path))
