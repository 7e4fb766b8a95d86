"""Diagnosis: the what-if report, matched against known cause signatures, with simulated remedies.

:class:`Diagnosis` is the public diagnose contract (a pydantic model); ``diagnose(trace)`` is the
diagnosis of :mod:`diagnosers.diagnosis_doc` (which says what it does, step by step) validated into
it. The command line prints that module's document without building the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from diagnosers.detectors.base import CauseMatch
from diagnosers.diagnosis_doc import Progress, SimilarFn, diagnosis_json
from diagnosers.fidelity import Fidelity
from diagnosers.heatmap import Heatmap
from diagnosers.model import Trace
from diagnosers.remedy_model import Remedy
from diagnosers.report import WhatIfReport
from diagnosers.signature import CauseSignature

if TYPE_CHECKING:
    from diagnosers.whatif import WhatIfEngine


class SimilarIncident(BaseModel):
    """A past incident that looks like this job, as the incident library scored it."""

    model_config = ConfigDict(extra="forbid")

    id: str
    title: str
    score: float
    reasons: list[str] = Field(default_factory=list)


class HeadlineLoss(BaseModel):
    """The loss the summary quotes: the larger of the study's straggling loss and the measured one."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["straggling", "measured"] = Field(
        description="straggling: wasted_fraction = 1 - 1/S (the study's); measured: "
        "measured_loss_fraction = 1 - T_ideal / measured step time (launch gaps and stalls included)"
    )
    fraction: float = Field(ge=0.0, le=1.0)
    label: str = Field(description="the words the summary uses for it")


class Diagnosis(BaseModel):
    """The public diagnose contract (CLI ``--json`` and the MCP ``diagnose`` tool).

    ``fidelity`` is the first field: when it is ``unreliable`` the summary says so first, every
    confidence is lowered and no destructive remedy is proposed.
    """

    model_config = ConfigDict(extra="forbid")

    fidelity: Fidelity = Field(description="how far the simulated job, and so this diagnosis, holds")
    summary: str
    slowdown: float
    straggling: bool
    headline_loss: HeadlineLoss | None = Field(default=None, description="the loss the summary quotes")
    causes: list[CauseMatch] = Field(
        default_factory=list, description="ranked by marginal gain (then confidence)"
    )
    remedies: list[Remedy] = Field(default_factory=list)
    similar_incidents: list[SimilarIncident] = Field(default_factory=list)
    heatmap: Heatmap | None = Field(None, description="the job's per-worker slowdown heatmap")
    notes: list[str] = Field(default_factory=list)
    report: WhatIfReport

    @model_validator(mode="before")
    @classmethod
    def _fidelity_of_old_documents(cls, data: Any) -> Any:
        # A diagnosis stored before fidelity existed: judge it from its report's simulation error.
        if isinstance(data, dict) and "fidelity" not in data and isinstance(data.get("report"), dict):
            report = WhatIfReport.model_validate(data["report"])
            data = {**data, "fidelity": report.fidelity, "report": report}
        return data

    def signatures(self) -> list[CauseSignature]:
        """The matched causes in the vocabulary's terms, best first (for similar-incident search)."""
        return [c.signature() for c in self.causes]


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
    """Diagnose one trace: :func:`~diagnosers.diagnosis_doc.diagnosis_json` (same arguments, which
    it documents) validated into the model.

    - ``report``: a what-if report of this trace, computed when None;
    - ``engine``: the what-if engine of this trace (``diagnosers.whatif.build_engine``), built when
      None; detectors use it to test candidate locations and remedies to predict speedups;
    - ``similar``: ``similar(signatures=[CauseSignature], limit=N)``, e.g. the incident library's
      ``similar_incidents``; a failure there becomes a note, never a failed diagnosis;
    - ``progress``: called with (fraction done in [0, 1], message);
    - ``layers_per_stage``: overrides the trace metadata for the stage repartition remedy.
    """
    doc = diagnosis_json(
        trace,
        report,
        similar=similar,
        progress=progress,
        engine=engine,
        layers_per_stage=layers_per_stage,
        similar_limit=similar_limit,
    )
    return Diagnosis.model_validate(doc)
