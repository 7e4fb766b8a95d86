"""The ``onset`` temporal pattern: in the vocabulary, in incident signatures, in the similarity table."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from diagnosers.vocab import CauseId, Pattern, Temporal
from incidents.schema import CaseSignature


def test_onset_pattern_carries_its_step() -> None:
    p = Pattern(spatial="single-worker", temporal="onset", resource="compute", onset_step=7)
    assert p.temporal is Temporal.ONSET and p.onset_step == 7
    assert Pattern.model_validate(p.model_dump(mode="json")) == p
    # an onset whose step is unknown is allowed (incident reports often give none)
    assert Pattern(temporal="onset").onset_step is None


def test_onset_step_without_onset_is_rejected() -> None:
    with pytest.raises(ValidationError, match="onset_step 3 is given but temporal is 'persistent'"):
        Pattern(temporal="persistent", onset_step=3)
    with pytest.raises(ValidationError):
        Pattern(temporal="onset", onset_step=-1)


def test_incident_signature_accepts_onset() -> None:
    sig = CaseSignature.model_validate(
        {"cause": "faulty-machine", "pattern": {"temporal": "onset", "onset_step": 1200}, "note": "x"}
    )
    assert sig.cause is CauseId.FAULTY_MACHINE and sig.pattern.onset_step == 1200


def test_onset_is_close_to_persistent_in_similarity() -> None:
    from incidents.similar import _TEMPORAL, CLOSENESS

    m = CLOSENESS[1]
    on, per, spo = (_TEMPORAL.index(t) for t in (Temporal.ONSET, Temporal.PERSISTENT, Temporal.SPORADIC))
    assert m[on, on] == 1.0 and 0 < m[on, per] < 1 and m[on, spo] == 0
