"""``straggler-lens diagnose``: what-if analysis, matched causes, simulated remedies, heatmap.

Prints a readable diagnosis, or with ``--json`` the public diagnose JSON (the MCP ``diagnose``
tool returns the same shape): ``summary``, ``slowdown``, ``straggling``, ``causes``, ``remedies``,
``similar_incidents``, ``heatmap``, ``notes`` and ``report``. ``--heatmap out.png`` also writes the
job's DP x PP heatmap. The diagnosis is ``diagnosers.diagnosis_doc.diagnosis_json``'s document,
printed with ``--json`` without building the pydantic model (nor importing pydantic).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from server.cli.commands.trace_args import add_read_arguments, read_options


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "diagnose",
        help="find the straggler cause(s) of a trace, with remedies whose gain is simulated",
        description="Run the what-if analysis, match the result against known straggler signatures "
        "(stage imbalance, sequence-length imbalance, GC pauses, faulty machine, slow communication, "
        "dataloader stalls), and predict the gain of each remedy with the same simulator.",
    )
    add_read_arguments(p)
    p.add_argument("--json", action="store_true", help="print the diagnosis as JSON")
    p.add_argument("--heatmap", default=None, metavar="OUT.png", help="also write the DP x PP heatmap PNG")
    p.add_argument("--no-similar", action="store_true", help="skip the similar-incident search")
    p.set_defaults(func=handle)


def similar_function() -> Callable[..., Any]:
    """The incident library's ``similar_incidents`` (it loads the bundled library on first use)."""
    from incidents import similar_incidents

    return similar_incidents


def handle(args: argparse.Namespace) -> int:
    from diagnosers.diagnosis_doc import diagnosis_json
    from diagnosers.readers import load_trace
    from server.cli.progress import progress_bar

    with progress_bar("diagnose ") as bar:
        bar(0.0, "reading the trace")
        trace = load_trace(args.paths, read_options(args))
        similar = None if args.no_similar else similar_function()
        doc = diagnosis_json(
            trace,
            similar=similar,
            layers_per_stage=args.layers_per_stage,
            progress=lambda f, m: bar(0.05 + 0.95 * f, m),
        )
    if args.heatmap:
        from diagnosers.heatmap import Heatmap
        from diagnosers.render.png import render_png

        render_png(Heatmap.model_validate(doc["heatmap"]), args.heatmap)
    if args.json:
        # the document is Diagnosis.model_dump(mode="json"): printed as the model would print it,
        # without importing pydantic
        from diagnosers.plainmodel import json_text

        print(json_text(doc))
    else:
        from diagnosers.diagnose import Diagnosis
        from diagnosers.render.text import render_diagnosis

        print(render_diagnosis(Diagnosis.model_validate(doc)))
        if args.heatmap:
            print(f"\nheatmap written to {args.heatmap}")
    return 0
