"""Read-and-analyse speed against the physical floor, measured in the same run.

    .venv/bin/python -m bench.speed_bench                 # start-up, samples, the 1.9M-op job
    .venv/bin/python -m bench.speed_bench --large         # also the 15.3M-op job (~2 GB peak)
    .venv/bin/python -m bench.speed_bench --scaling       # cost against ops (1M..15M) and pp
    .venv/bin/python -m bench.speed_bench --jobs DIR      # keep the generated jobs in DIR
    .venv/bin/python -m bench.speed_bench --before SRC    # also run an older source tree, paired
    .venv/bin/python -m bench.speed_bench --analyze-only  # no diagnose runs (floor and analyze only)

Every figure is a fresh child process reaped with ``os.wait4`` (wall time, user + system CPU, peak
RSS of that child), the median of ``--repeat`` paired runs:

- start-up: ``analyze`` of the 6.8k-op ST sample against a fresh interpreter that only imports
  numpy and pyarrow (goal ≤ 1.5×);
- per trace (the samples AR and SE, a generated 111k-op job and the 1.9M-op job):
  ``bench/floor.py`` (read the 11 columns with pyarrow, to numpy, one vectorised pass),
  ``analyze --json`` and ``diagnose --no-similar --json``; printed as analyze / floor (goal ≤ 2.5×
  at 15.3M ops, ≤ 2× at 1.9M) and diagnose / analyze in wall and CPU time (goal ≤ 1.3× from ~100k
  ops up);
- ``--scaling``: CPU time against ops at pp 16 (dp 16..256, 64 microbatches, 10 steps; the
  log-log slope from the first to the last, goal ≤ 1.05) and against pp at a fixed op count.

Jobs are made by the project's generator (``straggler-lens generate``, one faulty worker, seed 1)
in a child process, so this process stays small.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from diagnosers.samples import artifact_trace

PY = sys.executable
FLOOR = str(Path(__file__).with_name("floor.py"))
CLI = [PY, "-m", "server.cli"]


def child(args: list[str], src: Path | None = None) -> tuple[float, float, float]:
    """(wall s, user + system CPU s, peak RSS MiB) of one child process; its output is discarded.
    ``src``: run the project's code from that source tree instead (an older checkout)."""
    env = None if src is None else {**os.environ, "PYTHONPATH": str(src)}
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        # ``-m`` puts the working directory first on the path: run an older tree from inside it
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=src)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        if os.waitstatus_to_exitcode(status) != 0:
            err.seek(0)
            raise RuntimeError(f"{' '.join(args)} failed: {err.read().decode()[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024.0


BEFORE: Path | None = None  # --before SRC: an older source tree, run beside the current one


def paired(commands: dict[str, list[str]], repeat: int) -> dict[str, tuple[float, float, float]]:
    """Median (wall, CPU, peak) of each command, the commands run in turn ``repeat`` times so the
    machine's load falls on all of them alike. A name ending in ``@before`` runs from ``BEFORE``."""
    runs: dict[str, list[tuple[float, float, float]]] = {k: [] for k in commands}
    for _ in range(repeat):
        for name, args in commands.items():
            runs[name].append(child(args, BEFORE if name.endswith("@before") else None))
    return {k: tuple(statistics.median(x[i] for x in v) for i in range(3)) for k, v in runs.items()}  # type: ignore[misc]


def job(folder: Path, dp: int, pp: int, mb: int, steps: int = 10) -> Path:
    """``trace.parquet`` of a generated 1F1B job with one faulty worker (made once per folder)."""
    out = folder / f"dp{dp}-pp{pp}-mb{mb}-s{steps}"
    trace = out / "trace.parquet"
    if not trace.exists():
        gen = ["generate", "--dp", str(dp), "--pp", str(pp), "-m", str(mb), "--steps", str(steps)]
        gen += ["--scenario", "faulty-machine", "--worker", f"1,{pp // 2}", "--seed", "1", "-o", str(out)]
        subprocess.run([*CLI, *gen], check=True, stdout=subprocess.DEVNULL)
    return trace


def ops_of(trace: Path) -> int:
    import pyarrow.parquet as pq

    return int(pq.ParquetFile(trace).metadata.num_rows)


def startup(repeat: int) -> None:
    st = str(artifact_trace("ST"))
    cmds = {"imports": [PY, "-c", "import numpy, pyarrow"], "analyze": [*CLI, "analyze", st, "--json"]}
    if BEFORE is not None:
        cmds["analyze@before"] = cmds["analyze"]
    r = paired(cmds, repeat)
    print("\n## start-up: analyze of the ST sample (6,784 ops) against `python -c 'import numpy, pyarrow'`")
    (iw, ic, _), (aw, ac, _) = r["imports"], r["analyze"]
    print(
        f"imports {iw:.3f} s ({ic:.3f} s CPU), analyze {aw:.3f} s ({ac:.3f} s CPU): "
        f"ratio {aw / iw:.2f} (CPU {ac / ic:.2f}; goal ≤ 1.5)"
    )
    if "analyze@before" in r:
        bw, bc, _ = r["analyze@before"]
        print(f"before: analyze {bw:.3f} s ({bc:.3f} s CPU), ratio {bw / iw:.2f} (CPU {bc / ic:.2f})")


def against_floor(traces: list[tuple[str, Path]], repeat: int, diagnose: bool) -> None:
    print("\n## analyze against the floor (wall s, CPU s, peak MiB; medians of paired runs)")
    print(
        "| trace | ops | floor wall | CPU | MiB | analyze wall | CPU | MiB | ×floor (wall) | ×floor (CPU) |"
        + (" diagnose wall | CPU | ×analyze wall (CPU) |" if diagnose else "")
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|---:|" if diagnose else ""))
    for label, trace in traces:
        cmds = {"floor": [PY, FLOOR, str(trace)], "analyze": [*CLI, "analyze", str(trace), "--json"]}
        if diagnose:
            cmds["diagnose"] = [*CLI, "diagnose", str(trace), "--no-similar", "--json"]
        if BEFORE is not None:
            cmds["analyze@before"] = cmds["analyze"]
            if diagnose:
                cmds["diagnose@before"] = cmds["diagnose"]
        r = paired(cmds, repeat)
        print(_floor_row(label, ops_of(trace), r, "", diagnose), flush=True)
        if BEFORE is not None:
            print(_floor_row("↳ before", ops_of(trace), r, "@before", diagnose), flush=True)


def _floor_row(
    label: str, ops: int, r: dict[str, tuple[float, float, float]], tag: str, diagnose: bool
) -> str:
    f, a = r["floor"], r["analyze" + tag]
    line = (
        f"| {label} | {ops:,} | {f[0]:.2f} | {f[1]:.2f} | {f[2]:,.0f} | {a[0]:.2f} | {a[1]:.2f} | "
        f"{a[2]:,.0f} | {a[0] / f[0]:.2f} | {a[1] / f[1]:.2f} |"
    )
    if diagnose:
        d = r["diagnose" + tag]
        line += f" {d[0]:.2f} | {d[1]:.2f} | {d[0] / a[0]:.2f} ({d[1] / a[1]:.2f}) |"
    return line


def slope(points: list[tuple[int, float]]) -> float:
    (x0, y0), (x1, y1) = points[0], points[-1]
    return math.log(y1 / y0) / math.log(x1 / x0)


def _times(wall: float, cpu: float, rss: float) -> str:
    return f"wall {wall:6.2f} s  CPU {cpu:6.2f} s  {rss:6,.0f} MiB"


def scaling(folder: Path, repeat: int) -> None:
    print("\n## cost against ops (pp 16, 64 microbatches, 10 steps): analyze CPU s (user + system)")
    pts: list[tuple[int, float]] = []
    for dp in (16, 64, 256):
        trace = job(folder, dp, 16, 64)
        wall, cpu, rss = paired({"a": [*CLI, "analyze", str(trace), "--json"]}, repeat)["a"]
        pts.append((ops_of(trace), cpu))
        print(f"dp {dp:>3}: {pts[-1][0]:>10,} ops  {_times(wall, cpu, rss)}", flush=True)
    print(f"log-log slope {pts[0][0]:,} → {pts[-1][0]:,} ops: {slope(pts):.3f} (goal ≤ 1.05)")
    print("\n## cost against pp at a fixed op count (dp × pp = 512, 32 microbatches, 10 steps)")
    for pp in (4, 8, 16):
        trace = job(folder, 512 // pp, pp, 32)
        wall, cpu, rss = paired({"a": [*CLI, "analyze", str(trace), "--json"]}, repeat)["a"]
        print(f"pp {pp:>2}: {ops_of(trace):>10,} ops  {_times(wall, cpu, rss)}", flush=True)


def twins() -> None:
    """The no-op twin search on an interleaved job (512 no-op P2P records among 16k groups): the
    graph build with it, as a ratio to the build without it (in-process CPU time)."""
    from diagnosers.graph import build_template
    from diagnosers.synth import ScenarioSpec, generate
    from diagnosers.synth.spec import Schedule

    spec = ScenarioSpec(dp=1, pp=16, vpp=4, microbatches=128, steps=1, schedule=Schedule.INTERLEAVED, seed=3)
    trace = generate(spec).trace
    cpu = {}
    for join in (False, True):
        t0 = time.process_time()
        t = build_template(trace, join_batched_noops=join)
        cpu[join] = time.process_time() - t0
    print(
        f"\n## no-op twin search: pp 16 × vpp 4 × 128 mb, {t.no_ops} no-op records: graph build "
        f"{cpu[False]:.2f} s without, {cpu[True]:.2f} s with ({cpu[True] / cpu[False]:.2f}×)"
    )


def compile_sources(*trees: Path) -> None:
    """Byte-compile the project's packages of each source tree once, as ``pip install`` does for
    an installed package: with ``PYTHONDONTWRITEBYTECODE`` set (as on the build machine) every child
    would otherwise compile the project's ~30 modules from source on each run (~0.08 s)."""
    import compileall

    for tree in trees:
        for pkg in ("diagnosers", "server", "incidents"):
            if (tree / pkg).is_dir():
                compileall.compile_dir(str(tree / pkg), quiet=1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--large", action="store_true", help="also the 15.3M-op job (dp 256 × pp 16 × 64 mb)")
    ap.add_argument("--scaling", action="store_true")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--jobs", type=Path, default=None, help="folder for the generated jobs (kept)")
    ap.add_argument(
        "--before", type=Path, default=None, help="also run analyze/diagnose from this source tree"
    )
    ap.add_argument("--skip-small", action="store_true", help="only the --large / --scaling parts")
    ap.add_argument(
        "--analyze-only", action="store_true", help="no diagnose runs (floor and analyze figures only)"
    )
    a = ap.parse_args(argv)
    global BEFORE
    BEFORE = a.before
    compile_sources(Path(__file__).resolve().parents[1], *([a.before] if a.before else []))
    with tempfile.TemporaryDirectory() as tmp:
        folder = a.jobs or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        if not a.skip_small:
            startup(max(a.repeat, 5))
            twins()
            traces = [(f"sample {n}", artifact_trace(n)) for n in ("AR", "SE")]
            # a generated job at the goal's lower end (about 100k ops), beside the two samples
            traces.append(("dp 32 × pp 4 × 16 mb × 10 steps", job(folder, 32, 4, 16)))
            traces.append(("dp 128 × pp 8 × 32 mb × 10 steps", job(folder, 128, 8, 32)))
            against_floor(traces, a.repeat, diagnose=not a.analyze_only)
        if a.large:
            big = job(folder, 256, 16, 64)
            against_floor([("dp 256 × pp 16 × 64 mb × 10 steps", big)], a.repeat, diagnose=not a.analyze_only)
        if a.scaling:
            scaling(folder, a.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
