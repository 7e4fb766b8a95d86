"""``straggler-lens timeline``: a Chrome trace-event timeline of the actual and the straggler-free run.

Writes the document of ``diagnosers.timeline.chrome_trace`` (open it in Perfetto or a
``chrome://tracing``-style viewer) and prints, per chosen step, the critical path's shares and
where each worker's time goes (``--json``: the ``TimelineAnalysis`` of those steps instead). Only
``argparse`` is imported at module level; the engine is imported inside the handler.
"""

from __future__ import annotations

import argparse
from typing import Any

from server.cli.commands.trace_args import add_read_arguments


def step_list(text: str) -> list[int]:
    """Comma-separated step ids, e.g. ``23,25``."""
    try:
        values = [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated step ids, got {text!r}") from exc
    if not values:
        raise argparse.ArgumentTypeError("expected at least one step id")
    return values


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "timeline",
        help="Chrome trace-event timeline of the actual vs the straggler-free run, with critical paths",
        description="Export the chosen steps (default: the worst and a typical one) as Chrome "
        "trace-event JSON: one process per worker, the recorded ops and the simulated "
        "straggler-free ops as one thread per run, critical-path ops marked, P2P pairs and collective "
        "members linked by flow events. Prints the critical paths and where each worker's time goes.",
    )
    add_read_arguments(p)
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="where to write the JSON")
    p.add_argument(
        "--steps",
        type=step_list,
        default=None,
        metavar="N,N,...",
        help="step ids to export (default: the worst and a typical step; at most 16)",
    )
    p.add_argument("--json", action="store_true", help="print the critical paths and breakdown as JSON")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from diagnosers.readers import load_trace
    from diagnosers.timeline import analyze_timeline, chrome_trace
    from diagnosers.whatif import build_engine
    from server.cli.commands.trace_args import read_options

    trace = load_trace(args.paths, read_options(args))
    eng = build_engine(trace)
    doc = chrome_trace(eng, args.steps)
    steps = [s["step"] for s in doc["otherData"]["steps"]]
    out = Path(args.output)
    body = json.dumps(doc, separators=(",", ":"), allow_nan=False)
    out.write_text(body, encoding="utf-8")
    analysis = analyze_timeline(eng, steps).model_dump(mode="json")
    if args.json:
        print(json.dumps(analysis, indent=1))
    else:
        print(f"wrote {out} ({len(body)} bytes, {len(doc['traceEvents'])} events, steps {steps})")
        print(summary(analysis))
    return 0


def summary(a: dict[str, Any], top: int = 4) -> str:
    """Readable lines for a ``TimelineAnalysis`` dict: per step, both runs' critical paths and the
    per-worker split of the actual run."""
    lines = [f"straggler-free step time: {a['straggler_free_step_time']:.4f} s"]
    for step in a["steps"]:
        role = " (worst)" if step == a["worst_step"] else (" (typical)" if step == a["typical_step"] else "")
        lines.append(f"step {step}{role}: actual {a['actual_step_time'][str(step)]:.4f} s")
        for cp in (c for c in a["critical_paths"] if c["step"] == step):
            shares = ", ".join(f"{k} {100 * v:.0f}%" for k, v in list(cp["share_by_optype"].items())[:top])
            gap = cp["share_by_kind"].get("launch-gap", 0.0)
            lines.append(
                f"  critical path ({cp['run']}): {cp['length']:.4f} s over {len(cp['segments'])} segments; "
                f"{shares}; launch gaps {100 * gap:.0f}%"
            )
        lines.append("  worker                 compute  exposed-comm  bubble  straggler-wait  launch-gaps")
        for w in (w for w in a["breakdown"] if w["step"] == step):
            t = w["step_time"] or 1.0
            lines.append(
                f"  dp {w['dp_rank']:>3} pp {w['pp_rank']:>2} rank {w['rank']:>5}  "
                f"{100 * w['compute'] / t:6.1f}%  {100 * w['exposed_comm'] / t:11.1f}%  "
                f"{100 * w['bubble'] / t:5.1f}%  {100 * w['straggler_wait'] / t:13.1f}%  "
                f"{100 * w['launch_gaps'] / t:10.1f}%"
            )
    return "\n".join(lines)
