"""The remedy model: what to do about one cause and the gain a what-if run predicts for it.

Apart from :mod:`diagnosers.remedies` so that the modules that build remedies for one kind of job
(:mod:`diagnosers.partition`) need not import the module that dispatches to them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from diagnosers.plainmodel import PlainModel, pydantic_checked, validating

Details = dict[str, float | int | str | list[int] | list[float] | None]


# A plain dataclass that pydantic validates and describes where it is loaded (the Diagnosis model,
# the server's results) with the schema it had as a model (:mod:`diagnosers.plainmodel`).
@dataclass(kw_only=True)
class Remedy(PlainModel):
    """What to do about one cause, and the gain a what-if run predicts for it."""

    __pydantic_config__: ClassVar[dict[str, Any]] = {"extra": "forbid"}

    cause_id: str
    action: str
    predicted_speedup: float = field(
        metadata={"ge": 1.0, "description": "T_now / T_after from a what-if run"}
    )
    destructive: bool = field(
        default=False,
        metadata={
            "description": "the action takes machines out of the job or restarts it (e.g. a drain)"
        },
    )
    details: Details = field(default_factory=dict)

    def __post_init__(self) -> None:
        if validating():
            return
        s = self.predicted_speedup
        plain = (
            type(self.cause_id) is str
            and type(self.action) is str
            and type(s) is float
            and s >= 1.0
            and type(self.destructive) is bool
            and _plain_details(self.details)
        )
        if not plain:
            pydantic_checked(self)


def _plain_details(details: Any) -> bool:
    """Whether every detail is one pydantic keeps as it is: a float, int, str or None, or a list
    (empty, all ints or all floats). Anything else (bools, numpy scalars, tuples, mixed lists) is
    pydantic's to convert or refuse."""
    if type(details) is not dict:
        return False
    for key, value in details.items():
        kind = type(value)
        if type(key) is not str:
            return False
        if kind in (float, int, str, type(None)) or (kind is list and not value):
            continue
        if kind is not list or type(value[0]) not in (int, float):
            return False
        first = type(value[0])
        if any(type(x) is not first for x in value):
            return False
    return True


def speedup(t_now: float, t_after: float) -> float:
    """T_now / T_after rounded to 4 digits, never below 1 (a fix that does not help gains nothing)."""
    return round(max(1.0, t_now / t_after), 4) if t_after > 0 else 1.0
