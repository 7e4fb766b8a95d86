"""``CauseSignature``: a cause with its shape, the unit the incident library compares.

A pydantic model (the incident library's case signatures extend it with a note), kept out of
:mod:`diagnosers.vocab` so that the vocabulary, and the diagnosis built from it, import no
pydantic; import it from here.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from diagnosers.vocab import CauseId, Location, Pattern


class CauseSignature(BaseModel):
    """A cause with its shape: what a diagnosis says, what a label holds, what an incident records.

    The incident library compares these field by field to find similar cases.
    """

    model_config = ConfigDict(extra="forbid")

    cause: CauseId
    pattern: Pattern = Field(default_factory=Pattern)
    location: Location | None = None
    confidence: float | None = Field(None, ge=0.0, le=1.0)
