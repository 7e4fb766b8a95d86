"""``straggler-lens generate``: write a synthetic job with injected causes and its ground-truth labels.

Writes ``DIR/trace.parquet`` (the artifact's schema), ``DIR/meta.yaml`` and ``DIR/labels.json``;
``--format native`` adds ``DIR/trace.jsonl``. Prints one JSON object: the output files, the number
of ops, the generator's own slowdown estimate and the labels.
"""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "generate",
        help="generate a synthetic trace with injected straggler causes and labels",
        description="Generate a synthetic pipeline x data-parallel training trace, the way a profiler "
        "records it, with injected causes and a labels.json ground truth.",
    )
    p.add_argument("--dp", type=int, default=2, help="data-parallel size (default 2)")
    p.add_argument("--pp", type=int, default=4, help="pipeline stages (default 4)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel size (collapsed; default 1)")
    p.add_argument("--cp", type=int, default=1, help="context-parallel size (collapsed; default 1)")
    p.add_argument("--vpp", type=int, default=1, help="model chunks per stage (interleaved only)")
    p.add_argument("--microbatches", "-m", type=int, default=8, help="microbatches per step (default 8)")
    p.add_argument("--steps", type=int, default=4, help="traced steps (default 4)")
    p.add_argument("--schedule", choices=["1f1b", "interleaved", "gpipe"], default="1f1b")
    p.add_argument(
        "--scenario",
        default="none",
        help="comma-separated: none, stage-imbalance, stage-imbalance-first, sequence-length-imbalance, "
        "gc-pause, faulty-machine, slow-communication, dataloader-stall",
    )
    p.add_argument(
        "--magnitude",
        type=float,
        default=None,
        help="strength of the injected cause(s); see docs/GENERATOR.md for each meaning",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--host",
        type=int,
        default=None,
        help="faulty-machine / slow-communication on every traced GPU of this host",
    )
    p.add_argument(
        "--worker",
        default=None,
        metavar="DP,PP",
        help="faulty-machine / slow-communication on this worker (default: random by seed)",
    )
    p.add_argument("--gc-growing", action="store_true", help="gc pauses grow over the traced steps")
    p.add_argument("--gpus-per-host", type=int, default=8)
    p.add_argument(
        "--format",
        choices=["parquet", "native"],
        default="parquet",
        help="'native' also writes trace.jsonl (native JSON Lines)",
    )
    p.add_argument("-o", "--out", required=True, help="output directory")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from pydantic import ValidationError

    from diagnosers.synth import ScenarioSpec, generate
    from diagnosers.writers import write_meta_yaml, write_native, write_parquet

    worker = None
    if args.worker:
        try:
            d, s = (int(x) for x in args.worker.split(","))
        except ValueError as exc:
            raise ValueError(f"--worker expects DP,PP (two integers), got {args.worker!r}") from exc
        worker = (d, s)
    try:
        spec = ScenarioSpec(
            dp=args.dp,
            pp=args.pp,
            tp=args.tp,
            cp=args.cp,
            vpp=args.vpp,
            microbatches=args.microbatches,
            steps=args.steps,
            schedule=args.schedule,
            scenarios=args.scenario,
            magnitude=args.magnitude,
            seed=args.seed,
            host=args.host,
            worker=worker,
            gc_growing=args.gc_growing,
            gpus_per_host=args.gpus_per_host,
        )
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(x) for x in e['loc']) or 'spec'}: {e['msg']}" for e in exc.errors()
        )
        raise ValueError(f"invalid generate options: {problems}") from None
    job = generate(spec)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    files = {
        "trace": str(write_parquet(job.trace, out / "trace.parquet")),
        "meta": str(write_meta_yaml(job.trace.meta, out / "meta.yaml")),
    }
    labels = job.labels.model_dump(mode="json")
    (out / "labels.json").write_text(json.dumps(labels, indent=2) + "\n", encoding="utf-8")
    files["labels"] = str(out / "labels.json")
    if args.format == "native":
        files["native"] = str(write_native(job.trace, out / "trace.jsonl"))
    summary = {
        "files": files,
        "ops": len(job.trace.ops),
        "mean_step_time": round(job.step_time, 6),
        "true_slowdown": round(job.true_slowdown, 4),
        "labels": labels,
    }
    print(json.dumps(summary, indent=2))
    return 0
