"""Fleet study benchmark (not CI): a generated, labelled fleet analysed on a local Ray with 1 and 2
Ray workers; jobs per minute, the 2-worker speedup, and the fleet statistics beside the truth.

    .venv/bin/python -m bench.fleet_bench                       # 300 jobs, up to 1,024 workers
    .venv/bin/python -m bench.fleet_bench --jobs 40 --max-workers 64 --ray-workers 2   # quick

The fleet comes from ``diagnosers.synth.fleet`` (causes by ``CAUSE_MIX``, DP × PP sizes log-uniform
up to ``--max-workers`` workers, 2 traced steps) and is written as parquet + meta yaml with a
manifest. Each run analyses every job afresh into its own folder (no resume), with a Ray started for
the run; jobs per minute exclude Ray's start-up and shut-down (printed apart). The truth is the
generator's labels: the straggling share, each cause's share, and the GPU-hours-weighted waste from
the generator's own slowdown (1 − 1/true S), which is defined against a healthy run rather than the
method's pooled ideal, so that line is a comparison, not an identity. The speedup on a shared
2-core machine is reported, not targeted: other processes take CPU too, so say the load.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from diagnosers.synth.fleet import fleet_specs, read_manifest_labels, truth, write_fleet
from server.core.fleet import resolve_sources
from server.core.fleet_ray import run_fleet


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:5.1f}%"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=300)
    ap.add_argument("--max-workers", type=int, default=1024)
    ap.add_argument("--ray-workers", default="1,2", help="comma-separated Ray worker counts")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--progress", action="store_true", help="one line per job on stderr")
    ap.add_argument("--dir", default=None, help="keep the fleet and outputs here (default: a temp dir)")
    args = ap.parse_args()

    tmp = None if args.dir else tempfile.TemporaryDirectory(prefix="fleet-bench-")
    root = Path(args.dir or tmp.name)  # type: ignore[union-attr]
    print(f"command: fleet_bench --jobs {args.jobs} --max-workers {args.max_workers} "
          f"--ray-workers {args.ray_workers} --steps {args.steps} --seed {args.seed}")
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start")
    t0 = time.perf_counter()
    specs = fleet_specs(args.jobs, seed=args.seed, max_workers=args.max_workers, steps=args.steps)
    manifest = write_fleet(root / "fleet", specs)
    t_gen = time.perf_counter() - t0
    sizes = sorted(j.spec.dp * j.spec.pp for j in specs)
    print(f"generated {len(specs)} jobs in {t_gen:.0f} s; workers per job: min {sizes[0]}, "
          f"median {sizes[len(sizes) // 2]}, max {sizes[-1]}; {sum(s >= 512 for s in sizes)} jobs "
          "with >= 512 workers")
    want = truth(read_manifest_labels(manifest))
    jobs = resolve_sources([str(manifest)])

    results = {}
    for w in (int(x) for x in args.ray_workers.split(",")):
        t1 = time.perf_counter()
        say = (lambda m: print(m, file=sys.stderr, flush=True)) if args.progress else None
        out = run_fleet(jobs, root / f"out-{w}", workers=w, timeout_s=900, memory_mb=4096, progress=say)
        total = time.perf_counter() - t1
        results[w] = out
        print(f"{w} Ray worker(s): {out['analysed']} jobs in {out['seconds']:.0f} s = "
              f"{out['jobs_per_minute']:.1f} jobs/min (Ray start + stop + report: "
              f"{total - out['seconds']:.0f} s); {out['failed']} failed; "
              f"load average {os.getloadavg()[0]:.1f}")
    if 1 in results and 2 in results:
        ratio = results[2]["jobs_per_minute"] / results[1]["jobs_per_minute"]
        print(f"speedup 2 vs 1 Ray workers: {ratio:.2f}x")

    rep = results[max(results)]["report"]
    found = {m.cause: m.top_share for m in rep.cause_mix}
    print(f"\n{'statistic':<40} {'report':>8} {'truth':>8}")
    print(f"{'straggling share (S >= 1.1)':<40} {_pct(rep.straggling_share):>8} "
          f"{_pct(want['straggling_share']):>8}")
    for cause, share in want["cause_mix"].items():
        print(f"{'cause: ' + cause:<40} {_pct(found.get(cause, 0.0)):>8} {_pct(share):>8}")
    extra = sorted(set(found) - set(want["cause_mix"]))
    for cause in extra:
        print(f"{'cause (not injected): ' + cause:<40} {_pct(found[cause]):>8} {_pct(0.0):>8}")
    print(f"{'no cause':<40} {_pct(rep.no_cause_share):>8} {_pct(want['no_cause_share']):>8}")
    print(f"{'GPU-hours wasted (weighted)':<40} {_pct(rep.gpu_hours_wasted_share):>8} "
          f"{_pct(want['gpu_hours_wasted_share']):>8}")
    print(f"M_W > 0.5 among straggling: {_pct(rep.m_w_most_share)}; per-step / S p90 "
          f"{rep.step_spread.get('p90', float('nan')):.3f}; Spearman(S, GPUs) "
          f"{rep.size_correlation if rep.size_correlation is None else round(rep.size_correlation, 2)}; "
          f"unreliable {rep.counts['unreliable']}, failed {rep.counts['failed']}")
    print(f"bench run time: {time.perf_counter() - t0:.0f} s")
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
