"""The detectors' own per-row work: CPU of the trace statistics and of each detector, in-process.

    .venv/bin/python -m bench.detector_cost TRACE [--meta META] [--before SRC] [--repeat 3] [--calls 5]

Each figure is the minimum over ``--calls`` calls in one child process, on a finished report and
engine. Every detector is called on the same trace statistics, so after the first call the
probe's memo holds its what-if runs: the figure is the detector's per-row work without the runs
(the statistics several detectors share, e.g. the microbatch coherence test, are dropped before
each call, so each call computes them again). ``--before SRC`` runs an older source tree the same
way, the two alternated ``--repeat`` times so the machine's load falls on both alike; the table
gives the range over the repeats and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()


def measure(trace_path: str, meta: str | None, calls: int) -> dict[str, float]:
    """{"stats": s, <cause id>: s, ...}: minimum CPU seconds over ``calls`` calls (see module doc)."""
    from diagnosers import whatif
    from diagnosers.detectors import compute_stats, registry
    from diagnosers.readers import ReadOptions, load_trace

    trace = load_trace([Path(trace_path)], ReadOptions(meta_path=Path(meta) if meta else None))
    engine = whatif.build_engine(trace)
    report = whatif.analyze(trace, engine=engine)
    best: dict[str, float] = {}
    first = None
    for _ in range(calls):
        t0 = time.process_time()
        stats = compute_stats(trace, engine)
        best["stats"] = min(best.get("stats", float("inf")), time.process_time() - t0)
        first = first or stats
        for cause, detect in registry.all_detectors().items():
            # shared statistics are made again on every call: each call pays for what it computes
            cache = first._cache
            for key in [k for k in cache if isinstance(k, tuple) and k and k[0] == "shared"]:
                del cache[key]
            t0 = time.process_time()
            detect(report, first)
            best[cause.value] = min(best.get(cause.value, float("inf")), time.process_time() - t0)
    return best


def child(src: Path | None, trace: str, meta: str | None, calls: int) -> dict[str, float]:
    """:func:`measure` in a fresh process, the project's code taken from ``src`` (else this tree)."""
    env = {**os.environ, "PYTHONPATH": str(src or HERE.parents[1])}
    args = [sys.executable, str(HERE), "--child", trace, "--calls", str(calls)]
    args += ["--meta", meta] if meta else []
    root = src or HERE.parents[1]
    out = subprocess.run(args, env=env, cwd=root, check=True, capture_output=True, text=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--meta", default=None, help="the trace's meta file, when not found beside it")
    ap.add_argument("--before", type=Path, default=None, help="also run this (older) source tree")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(measure(a.trace, a.meta, a.calls)))
        return 0
    trees: dict[str, Path | None] = {"after": None}
    if a.before is not None:
        trees["before"] = a.before
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in trees}
    for _ in range(a.repeat):
        for name, src in trees.items():
            runs[name].append(child(src, a.trace, a.meta, a.calls))
    keys = list(runs["after"][0])
    print(
        f"\n## per-row work of the detectors, {a.trace} "
        f"(CPU s, min of {a.calls} calls; range over {a.repeat} runs)"
    )
    print("| part | this tree |" + (" before | × before (medians) |" if a.before else ""))
    print("|---|---:|" + ("---:|---:|" if a.before else ""))

    def span(name: str, key: str) -> tuple[str, float]:
        xs = [r.get(key, float("nan")) for r in runs[name]]
        return f"{min(xs):.3f}-{max(xs):.3f}", statistics.median(xs)

    for key in keys:
        now, m_now = span("after", key)
        line = f"| {key} | {now} |"
        if a.before is not None:
            old, m_old = span("before", key)
            line += f" {old} | {m_now / m_old:.2f} |" if m_old > 0 else f" {old} | - |"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
