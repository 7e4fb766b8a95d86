"""Shrink recorded traces in place: drop the per-aten ``cpu_op`` and autograd ``fwdbwd`` flow events.

The diagnosis reads the NDTimeline-named ``user_annotation`` spans (and the trace's metadata), which
are kept unchanged; the dropped events are ~85% of each file. Re-gzips at level 9.

    python tests/data/kineto_widened/trim.py FOLDER...
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

DROP = {"cpu_op", "fwdbwd"}


def trim(path: Path) -> None:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        doc = json.load(f)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in DROP]
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=9) as f:
        json.dump(doc, f, separators=(",", ":"))


if __name__ == "__main__":
    for folder in sys.argv[1:]:
        for p in sorted(Path(folder).rglob("*.json.gz")):
            trim(p)
