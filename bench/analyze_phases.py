"""Where one ``analyze`` spends its time: in-process CPU and wall time of each phase.

    .venv/bin/python -m bench.analyze_phases TRACE.parquet [--repeat N]

Phases, in the order ``straggler-lens analyze`` runs them: the read (``load_trace``: pyarrow's
decode, the reader's checks and normalisation, the causality note), the template graph
(``template_of``), the rest of the engine build (dense layouts, transfer times, launch delays,
ideal durations) and the report (``report_json``: every simulation pass). Each repeat runs in a
fresh child process, so the read pays its imports and page faults as the command does; the
first line of each child is the interpreter start and imports before the read. Medians over the
repeats are printed with the process's peak RSS, for reading beside ``bench.speed_bench``
(which times whole commands against the floor).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CHILD = r"""
import json, resource, sys, time
marks = [("start", time.process_time(), time.perf_counter())]
def mark(name):
    marks.append((name, time.process_time(), time.perf_counter()))
from diagnosers import whatif
from diagnosers.readers import load_trace
mark("imports")
trace = load_trace([sys.argv[1]])
mark("read")
template = whatif.template_of(trace)
mark("template")
whatif.template_of = lambda tr, _t=template: _t  # the engine build below reuses it
engine = whatif.build_engine(trace)
mark("engine")
whatif.report_json(trace, engine=engine)
mark("report")
phases = {b[0]: (b[1] - a[1], b[2] - a[2]) for a, b in zip(marks, marks[1:])}
phases["imports"] = (marks[1][1], marks[1][2] - marks[0][2])  # CPU since the interpreter started
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"phases": phases, "peak": peak}))
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args(argv)
    runs = []
    for _ in range(a.repeat):
        cmd = [sys.executable, "-c", CHILD, a.trace]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    names = list(runs[0]["phases"])
    print(f"| phase | CPU s | wall s |  (medians of {a.repeat} fresh processes)")
    print("|---|---:|---:|")
    for name in names:
        cpu = statistics.median(r["phases"][name][0] for r in runs)
        wall = statistics.median(r["phases"][name][1] for r in runs)
        print(f"| {name} | {cpu:.3f} | {wall:.3f} |")
    total_cpu = statistics.median(sum(c for c, _ in r["phases"].values()) for r in runs)
    print(f"| total | {total_cpu:.3f} | |")
    print(f"peak RSS {statistics.median(r['peak'] for r in runs):,.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
