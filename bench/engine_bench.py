"""What-if engine benchmark: a fresh ``straggler-lens analyze ... --json`` process per trace.

    .venv/bin/python -m bench.engine_bench            # ST, AR, SE, the 2M-op job (parquet + native)
    .venv/bin/python -m bench.engine_bench --large    # also a 7.7M-op job
    .venv/bin/python -m bench.engine_bench --quick    # the three artifact traces only

For each trace: wall time of the whole child process (interpreter start, imports, reading,
graph, every simulation including exact per-worker slowdowns, JSON output) and its peak resident
memory (``os.wait4`` rusage of that child). Then an in-process breakdown of the 2M-op job. The
synthetic jobs come from ``diagnosers.synth`` (one faulty worker, so there is straggling to find)
and are written as parquet + meta yaml (and native JSON Lines) into a temporary folder.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from diagnosers.samples import artifact_trace

_SCRIPT = Path(sys.executable).parent / "straggler-lens"
CLI = [str(_SCRIPT), "analyze"] if _SCRIPT.exists() else [sys.executable, "-m", "server.cli", "analyze"]


def run_child_rusage(args: list[str]) -> tuple[float, float, float, dict[str, object]]:
    """(wall s, CPU s, peak RSS MiB, parsed JSON) of one ``analyze --json`` child process, reaped
    with ``os.wait4`` so CPU time and peak RSS are that child's own. CPU time (user + system) is
    the steadier number on a shared machine."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([*CLI, *args, "--json"], stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            err.seek(0)
            raise RuntimeError(f"analyze failed: {err.read().decode()[-2000:]}")
        out.seek(0)
        data = json.loads(out.read())
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024.0, data


def synth_job(
    folder: Path, dp: int, pp: int, mb: int, steps: int, native: bool
) -> tuple[Path, Path | None, int]:
    from diagnosers.synth import Scenario, ScenarioSpec, generate
    from diagnosers.writers import write_meta_yaml, write_native, write_parquet

    job = generate(
        ScenarioSpec(
            dp=dp,
            pp=pp,
            microbatches=mb,
            steps=steps,
            scenarios=[Scenario.FAULTY_MACHINE],
            worker=(1, pp // 2),
        )
    )
    name = f"dp{dp}-pp{pp}-mb{mb}"
    pq = write_parquet(job.trace, folder / f"trace-{name}.parquet")
    write_meta_yaml(job.trace.meta, folder / f"meta-{name}.yaml")
    nat = write_native(job.trace, folder / f"{name}.native.jsonl") if native else None
    return pq, nat, len(job.trace.ops)


def row(label: str, n_ops: int, workers: int, run: tuple[float, float, float, dict[str, object]]) -> str:
    wall, cpu, rss, data = run
    slowdown = float(data["slowdown"])  # type: ignore[arg-type]
    return f"| {label} | {n_ops:,} | {workers:,} | {wall:.2f} | {cpu:.2f} | {rss:,.0f} | {slowdown:.3f} |"


def breakdown(path: Path) -> None:
    from diagnosers.readers import load_trace
    from diagnosers.whatif import analyze, build_engine

    t0 = time.perf_counter()
    trace = load_trace([path])
    t1 = time.perf_counter()
    eng = build_engine(trace)
    t2 = time.perf_counter()
    phases: list[tuple[float, str]] = []
    analyze(trace, engine=eng, progress=lambda f, m: phases.append((time.perf_counter(), m)))
    t3 = time.perf_counter()
    print(
        f"\nin-process, {len(trace.ops):,} ops: read {t1 - t0:.2f} s, graph + measurement {t2 - t1:.2f} s, "
        f"analyze {t3 - t2:.2f} s ({eng.template.n_nodes} template nodes)"
    )
    for (ta, msg), (tb, _) in itertools.pairwise(phases):
        print(f"  {msg}: {tb - ta:.3f} s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--large", action="store_true")
    a = ap.parse_args(argv)
    print("| trace | ops | workers | wall s | CPU s | peak RSS MiB | S |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, workers in (("ST", 8), ("AR", 16), ("SE", 64)):
        run = run_child_rusage([str(artifact_trace(name))])
        n_ops = int(run[3]["n_ops"])  # type: ignore[call-overload]
        print(row(f"artifact {name} (parquet)", n_ops, workers, run), flush=True)
    if a.quick:
        return 0
    sizes = [(128, 8, 32, 10)] + ([(128, 16, 64, 10)] if a.large else [])
    with tempfile.TemporaryDirectory() as tmp:
        big: Path | None = None
        for dp, pp, mb, steps in sizes:
            pq, nat, n_ops = synth_job(Path(tmp), dp, pp, mb, steps, native=(dp, pp) == (128, 8))
            run = run_child_rusage([str(pq)])
            label = f"synthetic dp {dp} × pp {pp} × {mb} mb × {steps} steps (parquet)"
            print(row(label, n_ops, dp * pp, run), flush=True)
            if nat is not None:
                run = run_child_rusage([str(nat)])
                label = f"same job (native JSON Lines, {nat.stat().st_size / 2**20:.0f} MiB)"
                print(row(label, n_ops, dp * pp, run), flush=True)
                big = pq
        if big is not None:
            breakdown(big)
    return 0


if __name__ == "__main__":
    sys.exit(main())
