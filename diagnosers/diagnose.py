"""Diagnosis: the what-if report, matched against known cause signatures, with simulated remedies.

``diagnose(trace)`` runs the what-if analysis (unless a report is given), computes the trace
statistics once, runs every registered detector, ranks the matches, checks a remedy for each with
the engine, and, when a ``similar`` callable is passed (the incident library's
``similar_incidents``), attaches similar past incidents. ``diagnosers`` never imports the incident
library or the server: callers pass the function in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from diagnosers.detectors.base import CauseMatch
from diagnosers.heatmap import Heatmap, job_heatmap
from diagnosers.model import Trace
from diagnosers.remedies import Remedy
from diagnosers.report import WhatIfReport
from diagnosers.vocab import CauseSignature

if TYPE_CHECKING:
    from diagnosers.whatif import WhatIfEngine

Progress = Callable[[float, str], None]
SimilarFn = Callable[..., Any]


class SimilarIncident(BaseModel):
    """A past incident that looks like this job, as the incident library scored it."""

    model_config = ConfigDict(extra="forbid")

    id: str
    title: str
    score: float
    reasons: list[str] = Field(default_factory=list)


class Diagnosis(BaseModel):
    """The public diagnose contract (CLI ``--json`` and the MCP ``diagnose`` tool)."""

    model_config = ConfigDict(extra="forbid")

    summary: str
    slowdown: float
    straggling: bool
    causes: list[CauseMatch] = Field(default_factory=list, description="ranked by confidence")
    remedies: list[Remedy] = Field(default_factory=list)
    similar_incidents: list[SimilarIncident] = Field(default_factory=list)
    heatmap: Heatmap | None = Field(None, description="the job's per-worker slowdown heatmap")
    notes: list[str] = Field(default_factory=list)
    report: WhatIfReport

    def signatures(self) -> list[CauseSignature]:
        """The matched causes in the vocabulary's terms, best first (for similar-incident search)."""
        return [c.signature() for c in self.causes]


def summarize(report: WhatIfReport, causes: Sequence[CauseMatch], remedies: Sequence[Remedy]) -> str:
    """One paragraph: verdict, the top cause and where, and the best simulated fix."""
    s = report.slowdown
    lost = f"{(1 - 1 / s) * 100:.1f}% of GPU time" if s > 1 else "no GPU time"
    if not causes:
        if report.straggling:
            return (
                f"No known straggler signature matched, although the job is slowed (S = {s:.3f}, {lost} "
                f"lost): look at the heatmap and the per-step slowdowns by hand."
            )
        return f"No straggler found: S = {s:.3f} ({lost} lost), within noise of the ideal run."
    top = causes[0]
    loc = top.location
    where = []
    if loc.pp_ranks and len(loc.pp_ranks) < report.job.pp:
        where.append(f"PP {','.join(map(str, loc.pp_ranks))}")
    if loc.dp_ranks and len(loc.dp_ranks) < report.job.dp:
        where.append(f"DP {','.join(map(str, loc.dp_ranks[:8]))}{'...' if len(loc.dp_ranks) > 8 else ''}")
    if loc.hosts and len(loc.hosts) <= 4 and top.pattern.spatial in {"single-worker", "one-host"}:
        where.append(f"host {','.join(map(str, loc.hosts))}")
    at = f" at {', '.join(where)}" if where else ""
    verdict = "Straggling" if report.straggling else "Mildly slowed"
    text = (
        f"{verdict} job (S = {s:.3f}, {lost} lost). Most likely cause: {top.id.value}{at} "
        f"(confidence {top.confidence:.2f})."
    )
    if len(causes) > 1:
        text += " Also: " + ", ".join(f"{c.id.value} ({c.confidence:.2f})" for c in causes[1:]) + "."
    best = max(remedies, key=lambda r: r.predicted_speedup, default=None)
    if best is not None and best.predicted_speedup > 1.0:
        text += f" Best simulated fix ({best.cause_id}): x{best.predicted_speedup:.3f} faster."
    return text


def _similar(similar: SimilarFn, causes: Sequence[CauseMatch], limit: int) -> list[SimilarIncident]:
    sigs = [c.signature() for c in causes]
    results = similar(signatures=sigs, limit=limit) if sigs else []
    # A page object with ``results`` (the incident library's) or any iterable of hits.
    hits = getattr(results, "results", results)
    out = []
    for r in hits or []:
        get = r.get if isinstance(r, Mapping) else (lambda k, _r=r: getattr(_r, k, None))
        out.append(
            SimilarIncident(
                id=str(get("id")),
                title=str(get("title") or ""),
                score=float(get("score") or 0.0),
                reasons=[str(x) for x in (get("reasons") or [])],
            )
        )
    return out


def diagnose(
    trace: Trace,
    report: WhatIfReport | None = None,
    *,
    similar: SimilarFn | None = None,
    progress: Progress | None = None,
    engine: WhatIfEngine | None = None,
    layers_per_stage: Sequence[int] | None = None,
    similar_limit: int = 5,
) -> Diagnosis:
    """Diagnose one trace.

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
        report = whatif.analyze(
            trace, engine=engine, progress=(lambda f, m: tick(0.15 + 0.25 * f, m)) if progress else None
        )
    tick(0.4, "computing trace statistics")
    stats = compute_stats(trace, engine)
    tick(0.55, "matching cause signatures")
    causes = detect_all(report, stats)
    tick(0.75, "simulating remedies")
    layers = list(layers_per_stage) if layers_per_stage is not None else trace.meta.layers_per_stage
    remedies = remedies_for(causes, stats, report, layers_per_stage=layers, meta=trace.meta)
    similar_cases: list[SimilarIncident] = []
    if similar is not None and causes:
        tick(0.9, "searching similar incidents")
        try:
            similar_cases = _similar(similar, causes, similar_limit)
        except Exception as exc:  # the incident library is optional context, not the diagnosis
            notes.append(f"similar-incident search failed: {exc}")
    tick(1.0, "done")
    return Diagnosis(
        summary=summarize(report, causes, remedies),
        slowdown=report.slowdown,
        straggling=report.straggling,
        causes=causes,
        remedies=remedies,
        similar_incidents=similar_cases,
        heatmap=job_heatmap(report),
        notes=notes + stats.notes,
        report=report,
    )
