"""The diagnosis of one trace as its JSON document, built without pydantic.

``diagnosis_json(trace)`` runs the what-if analysis (unless a report is given), computes the trace
statistics once, runs every registered detector, checks a remedy for each with the engine,
simulates each cause's marginal gain and ranks the causes by it, judges the simulation's fidelity
(discounting the launch gaps a found cause explains), lowers confidences and withholds destructive
remedies when it is unreliable, and, when a ``similar`` callable is passed (the incident library's
``similar_incidents``), attaches similar past incidents. The document is the one
``diagnose.Diagnosis.model_dump(mode="json")`` holds (same keys in the same order, JSON values
only), as ``whatif.report_json`` writes the report's: the command line prints it
(:func:`~diagnosers.plainmodel.json_text`), :func:`diagnosers.diagnose.diagnose` validates it into
the model. ``diagnosers`` never imports the incident library or the server: callers pass the
function in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from diagnosers.detectors.base import CauseMatch, TraceStats
from diagnosers.fidelity import Fidelity, assess_fidelity
from diagnosers.heatmap import job_heatmap
from diagnosers.model import Trace
from diagnosers.remedy_model import Remedy
from diagnosers.report_view import ReportView
from diagnosers.vocab import (
    MIN_STALL_STEPS_EXPLAINED,
    UNRELIABLE_CONFIDENCE_FACTOR,
    CauseId,
    FidelityVerdict,
    Resource,
)

if TYPE_CHECKING:
    from diagnosers.report import WhatIfReport
    from diagnosers.report_view import Report
    from diagnosers.whatif import WhatIfEngine

Progress = Callable[[float, str], None]
SimilarFn = Callable[..., Any]


def headline_loss(report: Report) -> dict[str, Any]:
    """The larger of ``wasted_fraction`` (1 - 1/S) and ``measured_loss_fraction``, named for what it
    is: the fields of a ``diagnose.HeadlineLoss`` (``kind``, ``fraction``, ``label``)."""
    wasted = max(0.0, report.wasted_fraction)
    measured = max(0.0, report.measured_loss_fraction)
    if measured > wasted:
        return {
            "kind": "measured",
            "fraction": min(1.0, measured),
            "label": "of the measured step time lost to straggling, launch gaps and stalls",
        }
    return {"kind": "straggling", "fraction": min(1.0, wasted), "label": "of GPU time lost to straggling"}


def _where(report: Report, top: CauseMatch) -> str:
    loc = top.location
    where = []
    if loc.pp_ranks and len(loc.pp_ranks) < report.job.pp:
        where.append(f"PP {','.join(map(str, loc.pp_ranks))}")
    if loc.dp_ranks and len(loc.dp_ranks) < report.job.dp:
        where.append(f"DP {','.join(map(str, loc.dp_ranks[:8]))}{'...' if len(loc.dp_ranks) > 8 else ''}")
    if loc.hosts and len(loc.hosts) <= 4 and top.pattern.spatial in {"single-worker", "one-host"}:
        where.append(f"host {','.join(map(str, loc.hosts))}")
    return f" at {', '.join(where)}" if where else ""


def _gain(c: CauseMatch) -> str:
    return f"fixing it alone: x{c.marginal_gain:.3f}" if c.marginal_gain is not None else "gain not simulated"


def summarize(
    report: Report,
    causes: Sequence[CauseMatch],
    remedies: Sequence[Remedy],
    fidelity: Fidelity | None = None,
) -> str:
    """One paragraph: fidelity first when unreliable, the verdict with the headline loss, the
    cause with the largest marginal gain and where, the others, and the best simulated fix.

    ``causes`` are expected in rank order (largest marginal gain first)."""
    fid = fidelity or report.fidelity
    s = report.slowdown
    loss = headline_loss(report)
    lost = f"{loss['fraction'] * 100:.1f}% {loss['label']}" if loss["fraction"] > 0 else "no time lost"
    head = ""
    if fid.verdict is FidelityVerdict.UNRELIABLE:
        head = (
            f"UNRELIABLE: the measured step time is {fid.unexplained_error * 100:.0f}% off what the "
            f"simulation explains (more than the study's 5% limit), so what follows is a hint, not a "
            f"diagnosis; confidences are lowered and nothing destructive is recommended. "
        )
    tail = ""
    if fid.verdict is FidelityVerdict.DEGRADED:
        tail = f" Fidelity degraded: {fid.unexplained_error * 100:.1f}% of the step time is unexplained."
    if not causes:
        if report.straggling:
            return head + (
                f"No known straggler signature matched, although the job is slowed (S = {s:.3f}, {lost}): "
                f"look at the heatmap and the per-step slowdowns by hand." + tail
            )
        return head + f"No straggler found: S = {s:.3f} ({lost}), within noise of the ideal run." + tail
    top = causes[0]
    verdict = "Straggling" if report.straggling else "Mildly slowed"
    stall = next((c for c in causes if c.id is CauseId.DATALOADER_STALL), None)
    if stall is not None and not report.straggling:
        verdict = "Stalled"
    text = (
        f"{verdict} job (S = {s:.3f}, {lost}). Largest gain: {top.id.value}{_where(report, top)} "
        f"({_gain(top)}; confidence {top.confidence:.2f})."
    )
    if stall is not None:
        per_step = stall.evidence.get("stall_s_per_step")
        if isinstance(per_step, (int, float)) and report.step_times.actual:
            actual = sum(report.step_times.actual.values()) / len(report.step_times.actual)
            text += (
                f" The input stall costs {float(per_step) * 1e3:.0f} ms per step, "
                f"{float(per_step) / actual * 100:.0f}% of the measured step time."
            )
    if len(causes) > 1:
        text += " Also: " + ", ".join(
            f"{c.id.value} ({_gain(c)}; confidence {c.confidence:.2f})" for c in causes[1:]
        ) + "."
    best = max(remedies, key=lambda r: r.predicted_speedup, default=None)
    if best is not None and best.predicted_speedup > 1.0:
        text += f" Best simulated fix ({best.cause_id}): x{best.predicted_speedup:.3f} faster."
    return head + text + tail


def explained_launch_error(report: Report, causes: Sequence[CauseMatch]) -> tuple[float, list[str]]:
    """The part of the simulation error that found launch-time causes account for, as a share of
    the no-delay simulated step time (the error's own base), and the ids of those causes.

    A launch-resource cause (a dataloader stall) states its idle seconds per step in its evidence
    (``stall_s_per_step``); those seconds are time the dependency model leaves out on purpose,
    provided the stall recurs in at least ``MIN_STALL_STEPS_EXPLAINED`` traced steps."""
    nd = report.step_times.no_delay
    t_nd = sum(nd.values()) / len(nd) if nd else 0.0
    if t_nd <= 0:
        return 0.0, []
    seconds, by = 0.0, []
    for c in causes:
        v = c.evidence.get("stall_s_per_step")
        hit = c.evidence.get("steps_stalling", 0)
        recurs = isinstance(hit, (int, float)) and hit >= MIN_STALL_STEPS_EXPLAINED
        if c.pattern.resource is Resource.LAUNCH and isinstance(v, (int, float)) and v > 0 and recurs:
            seconds += float(v)
            by.append(c.id.value)
    return seconds / t_nd, by


def lower_confidences(causes: Sequence[CauseMatch], fidelity: Fidelity) -> list[CauseMatch]:
    """When the fidelity is unreliable: each confidence times min(UNRELIABLE_CONFIDENCE_FACTOR,
    1 / (1 + unexplained error)), the detector's value kept in ``evidence``; else unchanged."""
    if fidelity.verdict is not FidelityVerdict.UNRELIABLE:
        return list(causes)
    factor = min(UNRELIABLE_CONFIDENCE_FACTOR, 1.0 / (1.0 + fidelity.unexplained_error))
    return [
        c.model_copy(
            update={
                "confidence": round(c.confidence * factor, 3),
                "evidence": {**c.evidence, "confidence_before_fidelity": c.confidence},
            }
        )
        for c in causes
    ]


def safe_remedies(remedies: Sequence[Remedy], fidelity: Fidelity) -> list[Remedy]:
    """When the fidelity is unreliable, every destructive remedy (a drain, a restart elsewhere)
    becomes a check of the same ranks: the simulated evidence cannot justify taking machines out."""
    if fidelity.verdict is not FidelityVerdict.UNRELIABLE:
        return list(remedies)
    out = []
    for r in remedies:
        if not r.destructive:
            out.append(r)
            continue
        ranks = r.details.get("ranks")
        who = f"ranks {ranks}" if isinstance(ranks, list) and ranks else "the named workers"
        out.append(
            r.model_copy(
                update={
                    "destructive": False,
                    "action": (
                        f"Do not drain or restart on this evidence (fidelity unreliable: "
                        f"{fidelity.unexplained_error * 100:.0f}% of the step time is unexplained). Check "
                        f"{who} instead: GPU clocks, throttling and errors (nvidia-smi -q, dcgmi diag), then "
                        f"re-profile with a trace the simulation reproduces."
                    ),
                    "details": {**r.details, "withheld": "drain withheld: fidelity unreliable"},
                }
            )
        )
    return out


def _similar(similar: SimilarFn, causes: Sequence[CauseMatch], limit: int) -> list[dict[str, Any]]:
    """The similar incidents of these causes as ``diagnose.SimilarIncident`` fields."""
    sigs = [c.signature() for c in causes]
    results = similar(signatures=sigs, limit=limit) if sigs else []
    # A page object with ``results`` (the incident library's) or any iterable of hits.
    hits = getattr(results, "results", results)
    out = []
    for r in hits or []:
        get = r.get if isinstance(r, Mapping) else (lambda k, _r=r: getattr(_r, k, None))
        out.append(
            {
                "id": str(get("id")),
                "title": str(get("title") or ""),
                "score": float(get("score") or 0.0),
                "reasons": [str(x) for x in (get("reasons") or [])],
            }
        )
    return out


def _with_marginal_gains(
    causes: Sequence[CauseMatch],
    stats: TraceStats,
    remedies: Sequence[Remedy],
    planned: list[Any] | None = None,
) -> list[CauseMatch]:
    """The causes with their marginal gains set, ranked by them (see :mod:`diagnosers.marginal`;
    ``planned``: its ``marginal_scenarios`` of these causes, made before the remedies)."""
    from diagnosers.marginal import marginal_gains, rank_by_gain

    gains = marginal_gains(causes, stats, remedies, planned)
    with_gain = [
        c.model_copy(update={"marginal_gain": g, "marginal_basis": b})
        for c, (g, b) in zip(causes, gains, strict=True)
    ]
    return rank_by_gain(with_gain)


def diagnosis_json(
    trace: Trace,
    report: WhatIfReport | None = None,
    *,
    similar: SimilarFn | None = None,
    progress: Progress | None = None,
    engine: WhatIfEngine | None = None,
    layers_per_stage: Sequence[int] | None = None,
    similar_limit: int = 5,
) -> dict[str, Any]:
    """The diagnosis of one trace as the JSON document of ``diagnose.Diagnosis``.

    - ``report``: a what-if report of this trace, computed when None;
    - ``engine``: the what-if engine of this trace (``diagnosers.whatif.build_engine``), built when
      None; detectors use it to test candidate locations and remedies to predict speedups;
    - ``similar``: ``similar(signatures=[CauseSignature], limit=N)`` returning items with ``id``,
      ``title``, ``score``, ``reasons`` (attributes or mapping keys), e.g. the incident library's
      ``similar_incidents``; a failure there becomes a note, never a failed diagnosis;
    - ``progress``: called with (fraction done in [0, 1], message);
    - ``layers_per_stage``: overrides the trace metadata for the stage repartition remedy.
    """
    from diagnosers import whatif
    from diagnosers.detectors import compute_stats, detect_all
    from diagnosers.marginal import launch_basis, marginal_scenarios
    from diagnosers.remedies import remedies_for

    def tick(frac: float, msg: str) -> None:
        if progress is not None:
            progress(frac, msg)

    notes: list[str] = []
    if engine is None:
        tick(0.05, "building the what-if engine")
        engine = whatif.build_engine(trace)
    if report is None:
        tick(0.15, "running the what-if analysis")
        doc = whatif.report_json(
            trace, engine=engine, progress=(lambda f, m: tick(0.15 + 0.25 * f, m)) if progress else None
        )
        view = ReportView.of(doc, trace.meta)
    else:
        view = ReportView.of(report.model_dump(mode="json"), report.job)
    tick(0.4, "computing trace statistics")
    stats = compute_stats(trace, engine)
    # kernel-level jobs (a reader-stated graph): causes judged without the transport's transient
    # collective stalls; other traces have no such view, nor import its module and kernel graphs
    noise = None
    if trace.graph is not None:
        from diagnosers.transport_noise import detection_view

        noise = detection_view(trace, engine, view)
    d_report: Report = view
    if noise is not None:
        d_report, stats = noise.report, noise.stats
    tick(0.55, "matching cause signatures")
    causes = detect_all(d_report, stats)
    tick(0.75, "simulating remedies")
    # the marginal-gain runs are known now: announced, they ride along with the remedies' runs
    planned = marginal_scenarios(causes, stats)
    if stats.probe is not None and not launch_basis(causes):  # (those run with the launch delays)
        stats.probe.ahead([v for _, v, _ in planned])
    layers = list(layers_per_stage) if layers_per_stage is not None else trace.meta.layers_per_stage
    remedies = remedies_for(causes, stats, d_report, layers_per_stage=layers, meta=trace.meta)
    tick(0.82, "simulating each cause's marginal gain")
    causes = _with_marginal_gains(causes, stats, remedies, planned)
    explained, by = explained_launch_error(view, causes)
    fidelity = assess_fidelity(view.simulation_error, explained, by)
    causes = lower_confidences(causes, fidelity)
    order = {c.id.value: i for i, c in enumerate(causes)}
    remedies = sorted(safe_remedies(remedies, fidelity), key=lambda r: order.get(r.cause_id, len(order)))
    view = view.with_fidelity(fidelity)
    similar_cases: list[dict[str, Any]] = []
    if similar is not None and causes:
        tick(0.9, "searching similar incidents")
        try:
            similar_cases = _similar(similar, causes, similar_limit)
        except Exception as exc:  # the incident library is optional context, not the diagnosis
            notes.append(f"similar-incident search failed: {exc}")
    tick(1.0, "done")
    return diagnosis_document(
        view,
        fidelity=fidelity,
        summary=summarize(view, causes, remedies, fidelity) + (noise.sentence if noise else ""),
        causes=causes,
        remedies=remedies,
        similar_incidents=similar_cases,
        notes=notes + (noise.notes if noise else []) + stats.notes,
    )


def diagnosis_document(
    report: ReportView,
    *,
    fidelity: Fidelity,
    summary: str,
    causes: Sequence[CauseMatch],
    remedies: Sequence[Remedy],
    similar_incidents: list[dict[str, Any]],
    notes: list[str],
) -> dict[str, Any]:
    """The Diagnosis document of these parts, its keys in ``Diagnosis``'s field order (and each
    part's dump in its class's), so that it and the model's dump are the same JSON text
    (``tests/diagnosis/test_diagnosis_json.py``). ``report`` carries the diagnosis's fidelity
    already (:meth:`ReportView.with_fidelity`); the heatmap is the job's (:func:`job_heatmap`)."""
    return {
        "fidelity": fidelity.model_dump(mode="json"),
        "summary": summary,
        "slowdown": report.slowdown,
        "straggling": report.straggling,
        "headline_loss": headline_loss(report),
        "causes": [c.model_dump(mode="json") for c in causes],
        "remedies": [r.model_dump(mode="json") for r in remedies],
        "similar_incidents": similar_incidents,
        "heatmap": job_heatmap(report).model_dump(mode="json"),
        "notes": notes,
        "report": report.document,
    }
