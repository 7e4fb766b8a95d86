"""The diagnosis's value types (Location, Pattern, CauseMatch) as plain dataclasses: built from
values of their fields' types they keep them; anything else goes through pydantic, so they convert
and refuse exactly as the pydantic models they were (defined here as the oracle), and pydantic
describes them with the same JSON schema."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from diagnosers.detectors.base import CauseMatch, Evidence
from diagnosers.remedy_model import Remedy
from diagnosers.vocab import CauseId, Location, Pattern, Resource, Spatial, Temporal


class OldLocation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    dp_ranks: list[int] = Field(default_factory=list)
    pp_ranks: list[int] = Field(default_factory=list)
    ranks: list[int] = Field(default_factory=list)
    hosts: list[int] = Field(default_factory=list)
    steps: list[int] = Field(default_factory=list)


class OldPattern(BaseModel):
    model_config = ConfigDict(extra="forbid")

    spatial: Spatial | None = None
    temporal: Temporal | None = None
    resource: Resource | None = None
    onset_step: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _onset_step_needs_onset(self) -> OldPattern:
        if self.onset_step is not None and self.temporal != Temporal.ONSET:
            shown = self.temporal.value if self.temporal else None
            raise ValueError(f"onset_step {self.onset_step} is given but temporal is {shown!r}; "
                             "an onset step belongs to temporal 'onset'")
        return self


class OldCauseMatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: CauseId
    confidence: float = Field(ge=0.0, le=1.0)
    location: OldLocation
    pattern: OldPattern
    evidence: Evidence = Field(default_factory=dict)
    summary: str
    categories: list[str] = Field(default_factory=list, description="matching incident categories")
    marginal_gain: float | None = Field(
        default=None,
        ge=1.0,
        description="job speedup T_now / T_after if only this cause were fixed and every other left "
        "as it is, simulated by the what-if engine (set by the diagnosis; None when not simulated)",
    )
    marginal_basis: str | None = Field(default=None, description="what the marginal-gain run changed")


def _shape(schema: Any) -> Any:
    """A schema with the oracle's class names made the real ones."""
    if isinstance(schema, dict):
        return {k.removeprefix("Old"): _shape(v) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_shape(v) for v in schema]
    if isinstance(schema, str):
        return schema.replace("/Old", "/").removeprefix("Old")
    return schema


@pytest.mark.parametrize(
    ("plain", "old"), [(Location, OldLocation), (Pattern, OldPattern), (CauseMatch, OldCauseMatch)]
)
def test_pydantic_describes_them_as_the_models(plain: type, old: type[BaseModel]) -> None:
    new = TypeAdapter(plain).json_schema()
    ref = old.model_json_schema()
    # the classes' docstrings (the oracle has none) aside, the schemas are the same
    new.pop("description", None)
    for d in (new.get("$defs", {}), ref.get("$defs", {})):
        for v in d.values():
            if isinstance(v, dict) and v.get("type") == "object":
                v.pop("description", None)
    assert _shape(new) == _shape(ref)
    assert plain.model_json_schema() == TypeAdapter(plain).json_schema()  # type: ignore[attr-defined]


LOCATIONS: list[dict[str, Any]] = [
    {},
    {"dp_ranks": [1, 2], "pp_ranks": [0], "ranks": [3], "hosts": [0], "steps": [5, 6]},
    {"dp_ranks": ["1", 2]},
    {"dp_ranks": (1, 2)},
    {"dp_ranks": [np.int64(4)]},
    {"dp_ranks": [True]},
    {"dp_ranks": [1.0]},
    {"dp_ranks": [1.5]},
    {"steps": "x"},
]
PATTERNS: list[dict[str, Any]] = [
    {},
    {"spatial": Spatial.ONE_HOST, "temporal": Temporal.PERSISTENT, "resource": Resource.COMPUTE},
    {"spatial": "one-host", "temporal": "onset", "onset_step": 3},
    {"temporal": Temporal.ONSET, "onset_step": 3},
    {"temporal": Temporal.PERSISTENT, "onset_step": 3},
    {"temporal": "persistent", "onset_step": 3},
    {"onset_step": 2},
    {"temporal": "onset", "onset_step": -1},
    {"temporal": "onset", "onset_step": "4"},
    {"spatial": "nowhere"},
]
EVIDENCE: list[Any] = [
    1, 1.5, True, "x", None, [], [1, 2], [1.0, 2.5], ["a"], [1, 2.5], [True, 1], ["a", 1],
    np.float64(2.0), np.int64(3), np.bool_(True), (1, 2), [np.float64(1)], {"a": 1}, object(),
]


def _outcome(make: Any) -> Any:
    try:
        value = make()
    except ValidationError as exc:
        return "error", [(e["loc"], e["type"], e["msg"]) for e in exc.errors()]
    return "ok", value.model_dump(mode="json"), repr(value.model_dump()).replace("Old", "")


@pytest.mark.parametrize("kw", LOCATIONS)
def test_location_converts_and_refuses_as_the_model(kw: dict[str, Any]) -> None:
    assert _outcome(lambda: Location(**kw)) == _outcome(lambda: OldLocation(**kw))


@pytest.mark.parametrize("kw", PATTERNS)
def test_pattern_converts_and_refuses_as_the_model(kw: dict[str, Any]) -> None:
    assert _outcome(lambda: Pattern(**kw)) == _outcome(lambda: OldPattern(**kw))


@pytest.mark.parametrize("value", EVIDENCE, ids=repr)
@pytest.mark.parametrize("confidence", [0.5, 1, 1.5, np.float64(0.25)])
def test_cause_match_converts_and_refuses_as_the_model(value: Any, confidence: Any) -> None:
    kw = {"id": CauseId.GC_PAUSE, "confidence": confidence, "summary": "s", "evidence": {"k": value, "n": 2}}
    new = _outcome(lambda: CauseMatch(**kw, location=Location(dp_ranks=[1]), pattern=Pattern()))
    old = _outcome(lambda: OldCauseMatch(**kw, location=OldLocation(dp_ranks=[1]), pattern=OldPattern()))
    assert new == old
    if new[0] == "ok":  # and the values themselves: same types (an int stays an int, numpy becomes plain)
        made = CauseMatch(**kw, location=Location(dp_ranks=[1]), pattern=Pattern())
        ref = OldCauseMatch(**kw, location=OldLocation(dp_ranks=[1]), pattern=OldPattern())
        assert repr(made.evidence) == repr(ref.evidence)
        assert repr(made.confidence) == repr(ref.confidence)


def test_cause_match_from_mappings_and_its_methods() -> None:
    m = CauseMatch(
        id="faulty-machine", confidence=0.9, location={"dp_ranks": [0]},  # type: ignore[arg-type]
        pattern={"temporal": "onset", "onset_step": 2}, summary="s",  # type: ignore[arg-type]
    )
    assert m.id is CauseId.FAULTY_MACHINE and m.location == Location(dp_ranks=[0])
    assert m.pattern == Pattern(temporal=Temporal.ONSET, onset_step=2)
    moved = m.model_copy(update={"marginal_gain": 1.25})
    assert moved.marginal_gain == 1.25 and m.marginal_gain is None
    with pytest.raises(ValidationError):
        m.model_copy(update={"marginal_gain": 0.5})
    assert CauseMatch.model_validate(m.model_dump(mode="json")) == m
    sig = m.signature()
    assert sig.cause is CauseId.FAULTY_MACHINE and sig.location == m.location and sig.confidence == 0.9


def test_the_vocabulary_imports_no_pydantic() -> None:
    code = (
        "import sys, diagnosers.vocab, diagnosers.plainmodel\n"
        "from diagnosers.vocab import Location, Pattern\n"
        "Location(dp_ranks=[1]); Pattern()\n"
        "assert 'pydantic' not in sys.modules, 'pydantic imported'\n"
        "from diagnosers.signature import CauseSignature\n"
        "assert 'pydantic' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


class OldRemedy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cause_id: str
    action: str
    predicted_speedup: float = Field(ge=1.0, description="T_now / T_after from a what-if run")
    destructive: bool = Field(
        default=False, description="the action takes machines out of the job or restarts it (e.g. a drain)"
    )
    details: dict[str, float | int | str | list[int] | list[float] | None] = Field(default_factory=dict)


def test_pydantic_describes_the_remedy_as_the_model() -> None:
    new = TypeAdapter(Remedy).json_schema()
    new.pop("description", None)
    assert _shape(new) == _shape(OldRemedy.model_json_schema())


@pytest.mark.parametrize("value", [*EVIDENCE, [1, 2], [1.5, 2.0], [2.0, 1]], ids=repr)
@pytest.mark.parametrize("speedup", [1.5, 1, 0.5, np.float64(1.25), "2"])
@pytest.mark.parametrize("destructive", [True, 0, "yes"])
def test_remedy_converts_and_refuses_as_the_model(value: Any, speedup: Any, destructive: Any) -> None:
    kw = {"cause_id": "gc-pause", "action": "a", "predicted_speedup": speedup,
          "destructive": destructive, "details": {"k": value, "ranks": [1, 2]}}
    new, old = _outcome(lambda: Remedy(**kw)), _outcome(lambda: OldRemedy(**kw))
    assert new == old
    if new[0] == "ok":
        made, ref = Remedy(**kw), OldRemedy(**kw)
        assert repr(made.details) == repr(ref.details)
        assert repr(made.predicted_speedup) == repr(ref.predicted_speedup)
        assert repr(made.destructive) == repr(ref.destructive)
