"""Diagnosis wall time and peak memory: artifact traces and generated jobs of growing size.

Prints, per job, the op count, the time of the what-if report alone (``analyze``) and of the whole
diagnosis (report + statistics + detectors + remedies + heatmap), and the ratio between them:
the price of diagnosing on top of analysing.

    .venv/bin/python bench/diagnose_perf.py [--large]
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

from diagnosers.diagnose import diagnose
from diagnosers.model import Trace
from diagnosers.readers import ReadOptions, load_trace
from diagnosers.synth import ScenarioSpec, generate
from diagnosers.whatif import analyze, build_engine

ARTIFACT = Path("/work/shared/data/straggler-artifact")


def measure(name: str, trace: Trace) -> None:
    t0 = time.perf_counter()
    analyze(trace, engine=build_engine(trace))
    t1 = time.perf_counter()
    d = diagnose(trace)
    t2 = time.perf_counter()
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    top = d.causes[0].id.value if d.causes else "none"
    print(
        f"{name:34s} ops {len(trace.ops):>9,d}  analyze {t1 - t0:6.2f} s  diagnose {t2 - t1:6.2f} s  "
        f"ratio {(t2 - t1) / max(t1 - t0, 1e-9):4.2f}  peak RSS {peak_mb:6.0f} MB  top cause {top}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--large", action="store_true", help="also a ~2M-op job (dp 128, pp 8, 32 mb, 10 steps)")
    args = ap.parse_args()
    # warm-up: the first analysis in a process pays for lazy imports and first-call set-up, which
    # would otherwise land on whichever row comes first (ST's diagnose looked faster than analyze)
    warm = generate(ScenarioSpec(dp=2, pp=2, microbatches=4, steps=2, seed=0)).trace
    diagnose(warm)
    for name in ("ST", "AR", "SE"):
        if (ARTIFACT / f"trace-{name}.parquet").exists():
            trace = load_trace(
                [ARTIFACT / f"trace-{name}.parquet"], ReadOptions(meta_path=ARTIFACT / f"meta-{name}.yaml")
            )
            measure(f"artifact {name}", trace)
    sizes = [(32, 4, 16, 4, "faulty-machine"), (64, 8, 16, 4, "sequence-length-imbalance")]
    if args.large:
        sizes.append((128, 8, 32, 10, "stage-imbalance"))
    for dp, pp, mb, steps, sc in sizes:
        job = generate(ScenarioSpec(dp=dp, pp=pp, microbatches=mb, steps=steps, scenarios=[sc], seed=1))
        measure(f"synthetic {dp}x{pp} mb{mb} x{steps} {sc[:10]}", job.trace)


if __name__ == "__main__":
    main()
