"""``straggler-lens fleet``: the study's fleet statistics over many jobs, one Ray task per job.

SOURCES are job folders (a trace and its meta yaml each), globs (each match one job) or manifests
(CSV or JSON Lines: ``job_id``, ``paths``, optional ``meta``, ``gpus``, ``duration_hours``,
``team``, ``timeout_s``, ``memory_mb``). Writes ``OUT/fleet.parquet`` (one row per job),
``OUT/report.json``, ``OUT/report.txt``, ``OUT/cdf.png``, ``OUT/causes.png``, ``OUT/size.png`` and
``OUT/jobs/<id>.json``; prints the text report, progress on stderr. A rerun into the same OUT skips
jobs already analysed with the same content hash. Exit code 0 when every job was analysed, 1 when
some failed (the report is written either way). See docs/FLEET.md.
"""

from __future__ import annotations

import argparse

from server.cli.commands.trace_args import positive_int


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from exc
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value}")
    return value


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "fleet",
        help="analyse many jobs in parallel on Ray and report the fleet's straggler statistics",
        description="Diagnose every job (one Ray task each; a local Ray unless --ray-address is given) "
        "and report the share of straggling jobs, GPU-hours wasted, CDFs, the cause mix, M_W, per-step "
        "spread and the size correlation, as the straggler study does for its fleet.",
    )
    p.add_argument("sources", nargs="+", metavar="SOURCE",
                   help="job folders, globs or manifests (.csv, .jsonl)")
    p.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="an existing Ray cluster (host:port); default: start a local one for this run")
    p.add_argument("-o", "--out", default="fleet-out", help="output folder (default fleet-out)")
    p.add_argument("--workers", type=positive_int, default=None,
                   help="jobs analysed at once (default: one per core)")
    p.add_argument("--timeout", type=positive_float, default=600.0, metavar="S",
                   help="per-job timeout in seconds (default 600; a manifest's timeout_s overrides)")
    p.add_argument("--memory-mb", type=positive_int, default=4096, metavar="M",
                   help="per-job memory limit in MiB, enforced inside the task (default 4096; a "
                   "manifest's memory_mb overrides)")
    p.add_argument("--json", action="store_true", help="print the fleet report as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    import sys

    from server.core.fleet import resolve_sources
    from server.core.fleet_ray import run_fleet

    jobs = resolve_sources(args.sources)
    if not jobs:
        raise ValueError("the sources name no jobs")

    def say(msg: str) -> None:
        if not args.quiet:
            print(msg, file=sys.stderr, flush=True)

    say(f"{len(jobs)} job(s); results in {args.out}")
    try:
        out = run_fleet(jobs, args.out, address=args.ray_address, workers=args.workers,
                        timeout_s=args.timeout, memory_mb=args.memory_mb, progress=say)
    except RuntimeError as exc:  # Ray missing, or a cluster that cannot be reached
        print(f"straggler-lens: error: {exc}", file=sys.stderr)
        return 2
    report = out["report"]
    if args.json:
        print(report.model_dump_json(indent=2))
    else:
        from diagnosers.fleet import render_fleet_text

        print(render_fleet_text(report))
    return 1 if out["failed"] else 0
