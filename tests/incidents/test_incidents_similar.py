"""similar_incidents from a case, a diagnosis (cause signatures) and free text."""

from __future__ import annotations

import pytest

from diagnosers.signature import CauseSignature
from diagnosers.vocab import CauseId, Location, Pattern, Spatial
from incidents import InvalidFilterError, Library, UnknownIncidentError, similar_incidents
from incidents.similar import derive_spatial


def _shapes(library: Library) -> list[CauseSignature]:
    """Every distinct (cause, full pattern) shape the library records."""
    seen: dict[tuple[str, ...], CauseSignature] = {}
    for case in library.cases.values():
        for sig in case.signature:
            p = sig.pattern
            if p.spatial and p.temporal and p.resource:
                key = (sig.cause.value, p.spatial.value, p.temporal.value, p.resource.value)
                seen.setdefault(key, CauseSignature(cause=sig.cause, pattern=p))
    return list(seen.values())


def test_a_diagnosis_finds_cases_of_the_same_cause_and_shape_first(library: Library) -> None:
    shapes = _shapes(library)
    assert len(shapes) >= 10
    for probe in shapes:
        result = similar_incidents(signatures=[probe], limit=3, library=library)
        top = library.get(result.results[0].id)
        assert probe.cause in top.causes, (probe, top.id)
        own = next(s for s in top.signature if s.cause == probe.cause)
        assert own.pattern == probe.pattern, (probe, top.id, own.pattern)
        assert any("same" in r and "shape" in r for r in result.results[0].reasons)


def test_location_fills_in_the_spatial_pattern(library: Library) -> None:
    probe = CauseSignature(
        cause=CauseId.FAULTY_MACHINE,
        pattern=Pattern(temporal="persistent", resource="compute"),
        location=Location(dp_ranks=[3], pp_ranks=[1], ranks=[13], hosts=[1], steps=[0, 1, 2]),
        confidence=0.9,
    )
    result = similar_incidents(signatures=[probe], limit=3, library=library)
    for hit in result.results:
        sig = next(s for s in library.get(hit.id).signature if s.cause == CauseId.FAULTY_MACHINE)
        assert sig.pattern.spatial == Spatial.SINGLE_WORKER
    assert "faulty-machine: spatial single-worker from location" in result.results[0].reasons


def test_derive_spatial() -> None:
    assert derive_spatial(Location(ranks=[4])) == Spatial.SINGLE_WORKER
    assert derive_spatial(Location(ranks=[8, 9], hosts=[1])) == Spatial.ONE_HOST
    assert derive_spatial(Location(dp_ranks=[0, 1, 2], pp_ranks=[3])) == Spatial.ONE_STAGE
    assert derive_spatial(Location(dp_ranks=[0, 1], pp_ranks=[0, 1], hosts=[0, 1])) is None
    assert derive_spatial(None) is None


def test_from_a_case_excludes_itself_and_explains(library: Library) -> None:
    result = similar_incidents("IL-0419", limit=5, library=library)
    ids = [h.id for h in result.results]
    assert "IL-0419" not in ids
    assert set(ids[:3]) <= {"IL-0422", "IL-0457", "IL-0464"}
    assert all(h.reasons for h in result.results)
    assert "listed as a related case" in result.results[0].reasons


def test_cases_without_causes_match_on_category_tags_and_text(library: Library) -> None:
    result = similar_incidents("IL-0427", limit=4, library=library)
    assert all(library.get(h.id).category == "checkpointing-stall" for h in result.results)


def test_from_text_uses_synonyms_and_wording(library: Library) -> None:
    result = similar_incidents(text="step time creeping up for hours; python garbage collector suspected",
                               limit=3, library=library)
    assert all("gc-pause" in h.causes for h in result.results)


def test_results_iterate_like_a_list_of_hits(library: Library) -> None:
    result = similar_incidents(signatures=[CauseSignature(cause=CauseId.GC_PAUSE)], limit=2, library=library)
    assert [h.id for h in result] == [h.id for h in result.results] and len(result) == 2


def test_errors(library: Library) -> None:
    with pytest.raises(InvalidFilterError, match="needs a case_id, cause signatures or a text"):
        similar_incidents(library=library)
    with pytest.raises(UnknownIncidentError, match="unknown incident id 'IL-0001'"):
        similar_incidents("IL-0001", library=library)
    with pytest.raises(InvalidFilterError, match="limit must be between 1 and 100"):
        similar_incidents("IL-0417", limit=0, library=library)


def test_nothing_similar_says_so(library: Library) -> None:
    result = similar_incidents(text="zzqx vvwq", library=library)
    assert result.total == 0 and result.message and result.message.startswith("No similar incidents found")
