"""``straggler-lens diagnose``: what-if analysis, matched causes, simulated remedies, heatmap.

Prints a readable diagnosis, or with ``--json`` the public diagnose JSON (the MCP ``diagnose``
tool returns the same shape): ``summary``, ``slowdown``, ``straggling``, ``causes``, ``remedies``,
``similar_incidents``, ``heatmap``, ``notes`` and ``report``. ``--heatmap out.png`` also writes the
job's DP x PP heatmap.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any


def _int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from exc
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive layer counts, got {text!r}")
    return values


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "diagnose",
        help="find the straggler cause(s) of a trace, with remedies whose gain is simulated",
        description="Run the what-if analysis, match the result against known straggler signatures "
        "(stage imbalance, sequence-length imbalance, GC pauses, faulty machine, slow communication, "
        "dataloader stalls), and predict the gain of each remedy with the same simulator.",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="trace files, directories or globs (+ meta yaml)")
    p.add_argument("--format", default=None, help="input format (default: detected)")
    p.add_argument("--meta", default=None, help="job meta yaml (artifact keys)")
    p.add_argument("--dp", type=int, default=None)
    p.add_argument("--pp", type=int, default=None)
    p.add_argument("--tp", type=int, default=None)
    p.add_argument("--cp", type=int, default=None)
    p.add_argument("--gpus-per-host", type=int, default=None, help="GPUs per host (default 8)")
    p.add_argument(
        "--layers-per-stage",
        type=_int_list,
        default=None,
        metavar="N,N,...",
        help="transformer layers on each PP stage, for the stage-repartition remedy (e.g. 9,9,9,9)",
    )
    p.add_argument("--json", action="store_true", help="print the diagnosis as JSON")
    p.add_argument("--heatmap", default=None, metavar="OUT.png", help="also write the DP x PP heatmap PNG")
    p.add_argument("--no-similar", action="store_true", help="skip the similar-incident search")
    p.set_defaults(func=handle)


def similar_function() -> Callable[..., Any] | None:
    """The incident library's ``similar_incidents``, when the library provides it."""
    try:
        import incidents
    except ImportError:
        return None
    fn = getattr(incidents, "similar_incidents", None)
    if fn is None:
        try:
            from incidents import similar as mod  # type: ignore[attr-defined,unused-ignore]
        except ImportError:
            return None
        fn = getattr(mod, "similar_incidents", None)
    return fn if callable(fn) else None


def handle(args: argparse.Namespace) -> int:
    from pathlib import Path

    from diagnosers.diagnose import diagnose
    from diagnosers.readers import ReadOptions, load_trace

    opts = ReadOptions(
        format=args.format,
        meta_path=Path(args.meta) if args.meta else None,
        dp=args.dp,
        pp=args.pp,
        tp=args.tp,
        cp=args.cp,
        gpus_per_host=args.gpus_per_host,
        layers_per_stage=args.layers_per_stage,
    )
    trace = load_trace(args.paths, opts)
    similar = None if args.no_similar else similar_function()
    diagnosis = diagnose(trace, similar=similar, layers_per_stage=args.layers_per_stage)
    if args.heatmap and diagnosis.heatmap is not None:
        from diagnosers.render.png import render_png

        render_png(diagnosis.heatmap, args.heatmap)
    if args.json:
        print(diagnosis.model_dump_json(indent=2))
    else:
        from diagnosers.render.text import render_diagnosis

        print(render_diagnosis(diagnosis))
        if args.heatmap:
            print(f"\nheatmap written to {args.heatmap}")
    return 0
