"""``straggler-lens analyze``: the what-if report of a trace.

Prints a readable summary, or with ``--json`` the report (``WhatIfReport.model_dump(mode="json")``,
built by ``diagnosers.whatif.report_json`` without importing the pydantic models:
``slowdown``, ``straggling``, ``decomposed``, ``step_slowdown``, ``launch_slowdown``, ``attribution``
{``by_optype``, ``by_dp_rank``, ``by_stage``, their ``*_per_step``, ``by_worker``}, ``m_w``, ``m_s``,
``m_s_by_stage``, ``simulation_error``, ``wasted_fraction``, ``job``, ...). Only ``argparse`` is
imported at module level; the engine is imported inside the handler.
"""

from __future__ import annotations

import argparse
from typing import Any

from server.cli.commands.trace_args import add_read_arguments, positive_int, read_options


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "analyze",
        help="what-if analysis of a trace: slowdown, attributions, per-worker slowdowns",
        description="Rebuild the dependency graph of a traced training job, simulate it with every op "
        "at its typical duration, and report how much stragglers slow the job down and where.",
    )
    add_read_arguments(p)
    p.add_argument(
        "--exact-top-k",
        type=positive_int,
        default=None,
        metavar="K",
        help="run exact per-worker slowdowns only for the K workers with the highest estimate",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--include",
        action="append",
        choices=["timeline"],
        default=[],
        help="also compute, on demand: timeline = per-step critical paths (actual and straggler-free) "
        "and where each worker's time goes (a `timeline` key in --json)",
    )
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    import json

    from diagnosers.readers import load_trace
    from diagnosers.whatif import report_json
    from server.cli.progress import progress_bar

    with progress_bar("analyze ") as bar:
        bar(0.0, "reading the trace")
        trace = load_trace(args.paths, read_options(args))
        if "timeline" in args.include:
            bar(1.0, "")
        else:
            report = report_json(
                trace, exact_top_k=args.exact_top_k, progress=lambda f, m: bar(0.05 + 0.95 * f, m)
            )
    if "timeline" in args.include:
        return handle_with_timeline(args, trace)
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print(summary(report))
    return 0


def handle_with_timeline(args: argparse.Namespace, trace: Any) -> int:
    """The report plus ``timeline`` (``diagnosers.timeline.analyze_timeline`` over every step)."""
    import json

    from diagnosers.timeline import analyze_timeline
    from diagnosers.whatif import build_engine, report_json
    from server.cli.commands.timeline import summary as timeline_summary

    eng = build_engine(trace)
    doc = report_json(trace, exact_top_k=args.exact_top_k, engine=eng)
    doc["timeline"] = analyze_timeline(eng).model_dump(mode="json")
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        print(summary(doc))
        print(timeline_summary(doc["timeline"]))
    return 0


def _top(d: dict[str, float], n: int) -> str:
    items = sorted(d.items(), key=lambda kv: -kv[1])[:n]
    return ", ".join(f"{k} {v:.3f}" for k, v in items)


def summary(r: dict[str, Any]) -> str:
    """A readable summary of a report (the ``--json`` dict)."""
    job = r["job"]
    att = r["attribution"]
    lines = [
        f"job {job['trial_name']} (run {job['run_id']}): dp {job['dp']} x pp {job['pp']} x tp {job['tp']} "
        f"x cp {job['cp']}, vpp {job['vpp']}; {r['n_ops']} ops over {len(r['steps'])} steps",
        f"slowdown S = {r['slowdown']:.3f}"
        + ("  -> straggling (S >= 1.1)" if r["straggling"] else "  (not straggling: S < 1.1)"),
        f"wasted GPU time: {100 * r['wasted_fraction']:.1f}%   "
        f"simulation error: {100 * r['simulation_error']:.1f}% (launch slowdown {r['launch_slowdown']:.3f})",
    ]
    steps = r["step_slowdown"]
    if steps:
        worst = max(steps, key=steps.__getitem__)
        best = min(steps, key=steps.__getitem__)
        lines.append(f"per step: {steps[best]:.3f} (step {best}) .. {steps[worst]:.3f} (step {worst})")
    if not r["decomposed"]:
        lines.append("S < 1.03: attributions below are small by construction")
    lines += [
        f"by op type:  {_top(att['by_optype'], 4)}",
        f"by stage:    {_top(att['by_stage'], 4)}",
        f"by DP rank:  {_top(att['by_dp_rank'], 4)}",
    ]
    workers = att["by_worker"][:5]
    if workers:
        lines.append("slowest workers (exact S_w / estimate):")
        for w in workers:
            exact = f"{w['slowdown']:.3f}" if w["slowdown"] is not None else "  -  "
            lines.append(
                f"  dp {w['dp_rank']:>3} pp {w['pp_rank']:>2} rank {','.join(map(str, w['ranks'])):>5}: "
                f"{exact} / {w['slowdown_estimate']:.3f}"
            )
    for name, key in (("M_W (fix slowest 3% of workers)", "m_w"), ("M_S (fix last stage)", "m_s")):
        m = r.get(key)
        if m is not None:
            lines.append(f"{name}: removes {100 * m:.1f}% of the slowdown")
    for note in r["notes"]:
        lines.append(f"note: {note}")
    return "\n".join(lines)
