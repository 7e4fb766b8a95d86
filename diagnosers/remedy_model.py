"""The remedy model: what to do about one cause and the gain a what-if run predicts for it.

Apart from :mod:`diagnosers.remedies` so that the modules that build remedies for one kind of job
(:mod:`diagnosers.partition`) need not import the module that dispatches to them."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Remedy(BaseModel):
    """What to do about one cause, and the gain a what-if run predicts for it."""

    model_config = ConfigDict(extra="forbid")

    cause_id: str
    action: str
    predicted_speedup: float = Field(ge=1.0, description="T_now / T_after from a what-if run")
    destructive: bool = Field(
        default=False, description="the action takes machines out of the job or restarts it (e.g. a drain)"
    )
    details: dict[str, float | int | str | list[int] | list[float] | None] = Field(default_factory=dict)


def speedup(t_now: float, t_after: float) -> float:
    """T_now / T_after rounded to 4 digits, never below 1 (a fix that does not help gains nothing)."""
    return round(max(1.0, t_now / t_after), 4) if t_after > 0 else 1.0
