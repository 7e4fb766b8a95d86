"""The detectors' own per-row work: CPU of the trace statistics and of each detector, in-process.

    .venv/bin/python -m bench.detector_cost TRACE [--meta META] [--before SRC] [--repeat 3] [--calls 5]
                                                [--first]

Each figure is the minimum over ``--calls`` calls in one child process, on a finished report and
engine. Every detector is called on the same trace statistics, so after the first call the
probe's memo holds its what-if runs: the figure is the detector's per-row work without the runs
(the statistics several detectors share, e.g. the microbatch coherence test, are dropped before
each call, so each call computes them again). ``--before SRC`` runs an older source tree the same
way, the two alternated ``--repeat`` times so the machine's load falls on both alike; the table
gives the range over the repeats and the ratio of the medians.

``--first``: instead, the first diagnosis of a fresh process as the command line pays it (the
what-if runs, the remedies and the marginal gains included; the report made before, as
``analyze`` makes it): CPU (user + system) of the trace statistics, of each detector, of the
remedies and of the marginal gains, the whole call (user, system) and its minor page faults,
the last a count (memory first touched, which this shared VM charges as system time).
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
from typing import Any

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


def measure_first(trace_path: str, meta: str | None) -> dict[str, float]:
    """{"stats": s, <cause id>: s, "remedies": s, "marginal gains": s, "whole call": s, "user": s,
    "system": s, "page faults": n}: the first ``diagnosis_json`` call of this process (see
    ``--first`` in the module doc), CPU seconds (user + system) per part."""
    import resource

    from diagnosers import detectors as detectors_module
    from diagnosers import diagnosis_doc, marginal, remedies, whatif
    from diagnosers.detectors import registry
    from diagnosers.readers import ReadOptions, load_trace

    trace = load_trace([Path(trace_path)], ReadOptions(meta_path=Path(meta) if meta else None))
    engine = whatif.build_engine(trace)
    doc = whatif.report_json(trace, engine=engine)
    parts: dict[str, float] = {}

    def usage() -> tuple[float, float, int]:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime, r.ru_stime, r.ru_minflt

    def timed(name: str, fn: Any) -> Any:
        def run(*args: Any, **kwargs: Any) -> Any:
            u0, s0, _ = usage()
            try:
                return fn(*args, **kwargs)
            finally:
                u1, s1, _ = usage()
                parts[name] = parts.get(name, 0.0) + (u1 - u0) + (s1 - s0)

        return run

    for cause, detect in list(registry.all_detectors().items()):
        registry.DETECTORS[cause] = timed(cause.value, detect)
    detectors_module.compute_stats = timed("stats", detectors_module.compute_stats)
    remedies.remedies_for = timed("remedies", remedies.remedies_for)
    marginal.marginal_gains = timed("marginal gains", marginal.marginal_gains)
    whatif.report_json = lambda *args, **kwargs: doc  # made above, as analyze makes it
    u0, s0, f0 = usage()
    diagnosis_doc.diagnosis_json(trace, engine=engine)
    u1, s1, f1 = usage()
    order = ["stats", *(c.value for c in registry.DETECTORS), "remedies", "marginal gains"]
    out = {k: parts[k] for k in order if k in parts}
    out.update({"whole call": (u1 - u0) + (s1 - s0), "user": u1 - u0, "system": s1 - s0})
    out["page faults"] = float(f1 - f0)
    return out


def child(
    src: Path | None, trace: str, meta: str | None, calls: int, first: bool = False
) -> dict[str, float]:
    """:func:`measure` (``first``: :func:`measure_first`) in a fresh process, the project's code
    taken from ``src`` (else this tree)."""
    env = {**os.environ, "PYTHONPATH": str(src or HERE.parents[1])}
    args = [sys.executable, str(HERE), "--child", trace, "--calls", str(calls)]
    args += ["--meta", meta] if meta else []
    args += ["--first"] if first else []
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
    ap.add_argument("--first", action="store_true", help="the first diagnosis call, what-if runs included")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(measure_first(a.trace, a.meta) if a.first else measure(a.trace, a.meta, a.calls)))
        return 0
    trees: dict[str, Path | None] = {"after": None}
    if a.before is not None:
        trees["before"] = a.before
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in trees}
    for _ in range(a.repeat):
        for name, src in trees.items():
            runs[name].append(child(src, a.trace, a.meta, a.calls, a.first))
    keys = list(runs["after"][0])
    if a.first:
        print(f"\n## the first diagnosis call, {a.trace} (CPU s per part; range over {a.repeat} runs)")
    else:
        print(
            f"\n## per-row work of the detectors, {a.trace} "
            f"(CPU s, min of {a.calls} calls; range over {a.repeat} runs)"
        )
    print("| part | this tree |" + (" before | × before (medians) |" if a.before else ""))
    print("|---|---:|" + ("---:|---:|" if a.before else ""))

    def span(name: str, key: str) -> tuple[str, float]:
        xs = [r.get(key, float("nan")) for r in runs[name]]
        if key == "page faults":
            return f"{min(xs):,.0f}-{max(xs):,.0f}", statistics.median(xs)
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
