"""A read-only view of the what-if report's JSON document, for the diagnosis.

The detectors, remedies, heatmap and summary read a report by attribute (``report.slowdown``,
``report.attribution.by_worker[i].slowdown``, ``report.step_times.actual``, ...). The pydantic
:class:`~diagnosers.report.WhatIfReport` offers that, but importing pydantic and validating the
document costs more than diagnosing a small job. :class:`ReportView` offers the same attributes
over the document ``whatif.report_json`` writes (it holds the document's own dicts and lists, not
copies; nobody writes to them), so the command line's diagnosis never builds the model. ``Report``
is what those readers accept: either.

The view leaves out ``fix_ratios`` (the M_W / M_S records; nothing in the diagnosis reads them).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeAlias

from diagnosers.fidelity import Fidelity
from diagnosers.model import JobMeta
from diagnosers.thresholds import FidelityVerdict

if TYPE_CHECKING:
    from diagnosers.report import WhatIfReport

    Report: TypeAlias = "WhatIfReport | ReportView"


@dataclass(frozen=True)
class WorkerView:
    """One entry of ``attribution.by_worker`` (fields as :class:`~diagnosers.report.WorkerSlowdown`)."""

    dp_rank: int
    pp_rank: int
    ranks: list[int]
    slowdown: float | None
    slowdown_estimate: float


@dataclass(frozen=True)
class AttributionView:
    """The report's ``attribution`` (fields as :class:`~diagnosers.report.Attribution`)."""

    by_optype: dict[str, float]
    by_dp_rank: dict[str, float]
    by_stage: dict[str, float]
    by_optype_per_step: dict[str, dict[str, float]]
    by_dp_rank_per_step: dict[str, dict[str, float]]
    by_stage_per_step: dict[str, dict[str, float]]
    by_worker: list[WorkerView]
    by_worker_exact_top_k: int | None


@dataclass(frozen=True)
class StepTimesView:
    """The report's ``step_times`` (fields as :class:`~diagnosers.report.StepTimes`)."""

    actual: dict[str, float]
    no_delay: dict[str, float]
    ideal: dict[str, float]


@dataclass(frozen=True)
class ReportView:
    """The report's fields (as :class:`~diagnosers.report.WhatIfReport`, ``fix_ratios`` aside)
    over its JSON document ``document``, which the diagnosis writes out as its ``report``."""

    document: dict[str, Any]
    fidelity: Fidelity
    slowdown: float
    straggling: bool
    decomposed: bool
    step_slowdown: dict[str, float]
    launch_slowdown: float
    simulation_error: float
    step_launch_gap: dict[str, float]
    attribution: AttributionView
    m_w: float | None
    m_s: float | None
    m_s_by_stage: dict[str, float | None]
    wasted_fraction: float
    measured_loss_fraction: float
    step_times: StepTimesView
    job: JobMeta
    n_ops: int
    steps: list[int]
    notes: list[str]

    @classmethod
    def of(cls, doc: dict[str, Any], job: JobMeta) -> ReportView:
        """The view of a report document (``whatif.report_json``'s, or a ``WhatIfReport``'s
        ``model_dump(mode="json")``) of the job ``job`` (the document's ``job``, as an object)."""
        att = doc["attribution"]
        st = doc["step_times"]
        return cls(
            document=doc,
            fidelity=_fidelity(doc["fidelity"]),
            slowdown=doc["slowdown"],
            straggling=doc["straggling"],
            decomposed=doc["decomposed"],
            step_slowdown=doc["step_slowdown"],
            launch_slowdown=doc["launch_slowdown"],
            simulation_error=doc["simulation_error"],
            step_launch_gap=doc["step_launch_gap"],
            attribution=AttributionView(
                by_optype=att["by_optype"],
                by_dp_rank=att["by_dp_rank"],
                by_stage=att["by_stage"],
                by_optype_per_step=att["by_optype_per_step"],
                by_dp_rank_per_step=att["by_dp_rank_per_step"],
                by_stage_per_step=att["by_stage_per_step"],
                by_worker=[WorkerView(**w) for w in att["by_worker"]],
                by_worker_exact_top_k=att["by_worker_exact_top_k"],
            ),
            m_w=doc["m_w"],
            m_s=doc["m_s"],
            m_s_by_stage=doc["m_s_by_stage"],
            wasted_fraction=doc["wasted_fraction"],
            measured_loss_fraction=doc["measured_loss_fraction"],
            step_times=StepTimesView(actual=st["actual"], no_delay=st["no_delay"], ideal=st["ideal"]),
            job=job,
            n_ops=doc["n_ops"],
            steps=doc["steps"],
            notes=doc["notes"],
        )

    def with_fidelity(self, fidelity: Fidelity) -> ReportView:
        """The same report with another fidelity verdict (the diagnosis's own), in its document too."""
        document = {**self.document, "fidelity": fidelity.model_dump(mode="json")}
        return replace(self, fidelity=fidelity, document=document)


def _fidelity(doc: dict[str, Any]) -> Fidelity:
    """The :class:`Fidelity` of a report document's ``fidelity`` (its verdict as the enum)."""
    return Fidelity(**{**doc, "verdict": FidelityVerdict(doc["verdict"])})
