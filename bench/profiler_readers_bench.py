"""Profiler-format reader benchmark: Kineto and NDTimeline read throughput.

    .venv/bin/python -m bench.profiler_readers_bench            # all sizes
    .venv/bin/python -m bench.profiler_readers_bench --quick    # small sizes only

Kineto: the recorded example job (4 ranks, CPU/gloo, ~10k events per rank) and the DLRM 8-rank NCCL
set, then the example's rank files replicated over more steps (a longer profiling window) to show
how reading scales with events. NDTimeline: a generated DP x PP job written as parsed-record JSON
Lines and as the LocalTimelineNDHandler array, then read back. Prints seconds and throughput.
"""

from __future__ import annotations

import argparse
import gzip
import json
import tempfile
import time
from pathlib import Path

from diagnosers.ndtimeline_writer import write_local_timeline, write_records_jsonl
from diagnosers.readers import load_trace
from diagnosers.synth import ScenarioSpec, generate

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "tests" / "data" / "kineto_example" / "slow-rank" / "traces"
DLRM = ROOT / "tests" / "data" / "kineto_public" / "param-dlrm-8rank"


def _events(paths: list[Path]) -> int:
    n = 0
    for p in paths:
        with gzip.open(p, "rt") as fh:
            n += len(json.load(fh)["traceEvents"])
    return n


def _time_read(paths: list[Path]) -> tuple[float, int]:
    t0 = time.perf_counter()
    trace = load_trace(paths)
    return time.perf_counter() - t0, len(trace.ops)


def replicate_steps(src: Path, dst: Path, copies: int, level: int = 9) -> None:
    """The rank file with its profiled steps repeated ``copies`` times, later in time (steps renamed
    ``ProfilerStep#N+100c``), gzip at ``level``."""
    with gzip.open(src, "rt") as fh:
        doc = json.load(fh)
    ev = doc["traceEvents"]
    xs = [e for e in ev if e.get("ph") == "X"]
    span = max(e["ts"] + e.get("dur", 0) for e in xs) - min(e["ts"] for e in xs) + 1000.0
    out = [e for e in ev if e.get("ph") != "X"]
    for c in range(copies):
        for e in xs:
            e2 = dict(e)
            e2["ts"] = e["ts"] + c * span
            if e["name"].startswith("ProfilerStep#"):
                e2["name"] = f"ProfilerStep#{int(e['name'].split('#')[1]) + 100 * c}"
            out.append(e2)
    doc["traceEvents"] = out
    with gzip.open(dst, "wt", compresslevel=level) as fh:
        json.dump(doc, fh)


def bench_kineto(quick: bool) -> None:
    print("## Kineto read (load_trace: parse JSON, map ops, normalize)")
    print(f"{'input':<34} {'files':>5} {'events':>9} {'ops':>7} {'seconds':>8} {'kevents/s':>10}")
    sets = [("example slow-rank (gloo, 4 ranks)", sorted(EXAMPLE.glob("*.json.gz"))),
            ("param DLRM (NCCL, 8 ranks)", sorted(DLRM.glob("*.json.gz")))]
    with tempfile.TemporaryDirectory() as tmp:
        for copies in (5,) if quick else (5, 25):
            folder = Path(tmp) / f"x{copies}"
            folder.mkdir()
            for p in sorted(EXAMPLE.glob("*.json.gz")):
                replicate_steps(p, folder / p.name, copies)
            sets.append((f"example x{copies} steps", sorted(folder.glob("*.json.gz"))))
        for label, paths in sets:
            n_ev = _events(paths)
            secs, n_ops = _time_read(paths)
            print(f"{label:<34} {len(paths):>5} {n_ev:>9} {n_ops:>7} {secs:>8.2f} {n_ev / secs / 1e3:>10.0f}")


def bench_ndtimeline(quick: bool) -> None:
    print("## NDTimeline write + read (generated 1F1B job)")
    print(f"{'dp':>4} {'pp':>3} {'mb':>3} {'steps':>5} {'ops':>9} {'format':<8} {'write s':>8} "
          f"{'read s':>7} {'kops/s read':>11} {'MB':>6}")
    sizes = [(4, 4, 8, 4)] if quick else [(4, 4, 8, 4), (16, 4, 16, 10), (32, 8, 32, 10)]
    with tempfile.TemporaryDirectory() as tmp:
        for dp, pp, mb, steps in sizes:
            trace = generate(ScenarioSpec(dp=dp, pp=pp, microbatches=mb, steps=steps, seed=1)).trace
            for fmt in ("jsonl", "chrome"):
                path = Path(tmp) / (f"r{dp}.jsonl.gz" if fmt == "jsonl" else f"trace_step_{dp}.gz")
                t0 = time.perf_counter()
                if fmt == "jsonl":
                    write_records_jsonl(trace, path, epoch=1.7e9)
                else:
                    write_local_timeline(trace, path, epoch=1.7e9)
                tw = time.perf_counter() - t0
                t0 = time.perf_counter()
                back = load_trace([path])
                tr = time.perf_counter() - t0
                assert len(back.ops) == len(trace.ops)
                print(f"{dp:>4} {pp:>3} {mb:>3} {steps:>5} {len(trace.ops):>9} {fmt:<8} {tw:>8.2f} "
                      f"{tr:>7.2f} {len(trace.ops) / tr / 1e3:>11.0f} {path.stat().st_size / 1e6:>6.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    bench_kineto(a.quick)
    bench_ndtimeline(a.quick)


if __name__ == "__main__":
    main()
