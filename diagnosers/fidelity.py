"""The fidelity verdict of a simulation: how far the simulated job, and so what is read from it,
holds for the measured one. A plain dataclass (:mod:`diagnosers.plainmodel`), so that the diagnosis
builds it without importing pydantic; the report and diagnosis models hold it as a field, and
pydantic validates and describes it with the schema it had as a model."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from diagnosers.plainmodel import PlainModel, pydantic_checked, validating
from diagnosers.thresholds import FidelityVerdict, fidelity_fields


@dataclass(kw_only=True)
class Fidelity(PlainModel):
    """How well the simulated job stands for the measured one, and so how far to trust the rest.

    ``unexplained_error`` is the measured step time's excess over the simulated one, relative to
    the simulated one as in the study (``simulation_error = launch_slowdown - 1``), minus the part
    a found cause accounts for (``explained_error``, e.g. a dataloader stall's idle time before the
    first forward), as a magnitude (a simulation that overshoots counts too). The verdict compares it with
    ``vocab.FIDELITY_GOOD_MAX`` (3%) and ``vocab.FIDELITY_UNRELIABLE_ABOVE`` (the study's 5%).
    """

    __pydantic_config__: ClassVar[dict[str, Any]] = {"extra": "forbid"}

    verdict: FidelityVerdict
    unexplained_error: float = field(
        metadata={"ge": 0.0, "description": "simulation error left after explained gaps"}
    )
    reason: str
    simulation_error: float = field(
        default=0.0, metadata={"description": "launch_slowdown - 1, as in the report"}
    )
    explained_error: float = field(
        default=0.0, metadata={"ge": 0.0, "description": "error part found causes explain"}
    )
    explained_by: list[str] = field(
        default_factory=list, metadata={"description": "cause ids that account for it"}
    )

    def __post_init__(self) -> None:
        if validating():
            return
        u, e = self.unexplained_error, self.explained_error
        plain = (
            type(self.verdict) is FidelityVerdict
            and type(u) is float
            and u >= 0.0
            and type(self.reason) is str
            and type(self.simulation_error) is float
            and type(e) is float
            and e >= 0.0
            and type(self.explained_by) is list
            and all(type(x) is str for x in self.explained_by)
        )
        if not plain:
            pydantic_checked(self)

    @property
    def unreliable(self) -> bool:
        return self.verdict is FidelityVerdict.UNRELIABLE


def assess_fidelity(
    simulation_error: float, explained_error: float = 0.0, explained_by: Sequence[str] = ()
) -> Fidelity:
    """The fidelity verdict for a simulation error of which ``explained_error`` is accounted for
    (``thresholds.fidelity_fields``, which documents the rule, as a :class:`Fidelity`)."""
    return Fidelity(**fidelity_fields(simulation_error, explained_error, explained_by))
