"""Interleaved (virtual) pipelines: the what-if engine's simulation error and healthy S on a seeded
set of generated interleaved 1F1B jobs.

    .venv/bin/python -m bench.interleaved_bench              # the tuning set (48 jobs)
    .venv/bin/python -m bench.interleaved_bench --heldout    # the held-out set (other seeds), run once
    .venv/bin/python -m bench.interleaved_bench --jobs 12 -v # fewer jobs, one line per job

Jobs: vpp 2-4, dp 2-16, pp 2-8, microbatches pp or 2·pp (the schedule needs a multiple of pp),
3 steps, scenarios cycling through every cause except dataloader stalls (their gaps are launch
delays injected on purpose, which the simulation error would count) plus healthy jobs. Prints the
simulation error (launch_slowdown − 1) median, p90 and max, and S of the healthy jobs. Targets
(issue 13): median ≤ 1%, p90 ≤ 5%, healthy S ≤ 1.02.
"""

from __future__ import annotations

import argparse
import random
import sys
import time

import numpy as np

from diagnosers.synth import Scenario, ScenarioSpec, Schedule, generate

SCENARIOS: list[Scenario] = [
    Scenario.NONE,
    Scenario.STAGE_IMBALANCE,
    Scenario.FAULTY_MACHINE,
    Scenario.NONE,
    Scenario.SEQUENCE_LENGTH_IMBALANCE,
    Scenario.GC_PAUSE,
    Scenario.SLOW_COMMUNICATION,
    Scenario.STAGE_IMBALANCE_FIRST,
]
TUNING_SEED, HELDOUT_SEED = 1313, 91313


def bench_specs(n_jobs: int, heldout: bool = False) -> list[ScenarioSpec]:
    """The seeded job list: ``n_jobs`` specs; the held-out set draws with another seed."""
    base = HELDOUT_SEED if heldout else TUNING_SEED
    rng = random.Random(base)
    out = []
    for i in range(n_jobs):
        pp = rng.choice([2, 4, 8])
        out.append(
            ScenarioSpec(
                dp=rng.choice([2, 4, 8, 16]),
                pp=pp,
                vpp=rng.choice([2, 3, 4]),
                microbatches=pp * rng.choice([1, 2]) if pp > 2 else pp * rng.choice([2, 4]),
                steps=3,
                schedule=Schedule.INTERLEAVED,
                scenarios=[SCENARIOS[i % len(SCENARIOS)]],
                seed=base + i,
            )
        )
    return out


def main(argv: list[str] | None = None) -> int:
    from diagnosers.whatif import analyze

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=48, help="number of jobs (at least 40 for the figures)")
    p.add_argument("--heldout", action="store_true", help="the held-out job set (run once, at the end)")
    p.add_argument("-v", "--verbose", action="store_true", help="one line per job")
    args = p.parse_args(argv)
    errors, healthy = [], []
    t0 = time.perf_counter()
    if args.verbose:
        print(f"{'#':>3} {'vpp':>3} {'dp':>3} {'pp':>3} {'mb':>3} {'scenario':<26} {'S':>7} {'true':>7} "
              f"{'err %':>7}")
    for i, spec in enumerate(bench_specs(args.jobs, args.heldout)):
        job = generate(spec)
        rep = analyze(job.trace)
        errors.append(rep.simulation_error)
        if spec.scenarios == [Scenario.NONE]:
            healthy.append(rep.slowdown)
        if args.verbose:
            print(f"{i:>3} {spec.vpp:>3} {spec.dp:>3} {spec.pp:>3} {spec.microbatches:>3} "
                  f"{spec.scenarios[0].value:<26} {rep.slowdown:>7.4f} {job.true_slowdown:>7.4f} "
                  f"{rep.simulation_error * 100:>7.2f}", flush=True)
    e = np.asarray(errors) * 100
    h = np.asarray(healthy)
    which = "held-out" if args.heldout else "tuning"
    print(f"interleaved bench ({which} set): {len(e)} jobs in {time.perf_counter() - t0:.1f} s")
    print(f"simulation error %: median {np.median(e):.2f}, p90 {np.quantile(e, 0.9):.2f}, "
          f"max {e.max():.2f}, min {e.min():.2f}")
    if len(h):
        print(f"healthy jobs: n={len(h)}, S median {np.median(h):.4f}, max {h.max():.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
