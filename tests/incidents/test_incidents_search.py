"""search_incidents, list_incidents, get_incident, get_topic and vocab over the packaged library."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from incidents import (
    InvalidFilterError,
    Library,
    UnknownIncidentError,
    UnknownTopicError,
    get_incident,
    get_topic,
    list_incidents,
    search_incidents,
    vocab,
)
from incidents.library import PACKAGE_DIR
from incidents.schema import Case, Topic

QUERIES: list[dict[str, Any]] = yaml.safe_load((PACKAGE_DIR / "queries.yaml").read_text(encoding="utf-8"))


def test_the_query_set_is_big_and_varied_enough() -> None:
    assert len(QUERIES) >= 30
    kinds = {q["kind"] for q in QUERIES}
    assert {"typo", "synonym", "org", "number", "korean", "order", "filter"} <= kinds


@pytest.mark.parametrize("q", QUERIES, ids=[q["query"] for q in QUERIES])
def test_query_set_expected_case_is_in_the_top_3(q: dict[str, Any], library: Library) -> None:
    result = search_incidents(q["query"], limit=3, library=library, **q.get("filters", {}))
    assert q["expect"] in [h.id for h in result.results], (q, [(h.id, h.score) for h in result.results])


def test_results_carry_scores_reasons_and_matched_fields(library: Library) -> None:
    result = search_incidents("garbage collection", library=library)
    assert result.total >= 4
    top = result.results[0]
    assert "gc-pause" in top.causes
    assert any("gc-pause" in r for r in top.reasons)
    assert "causes" in top.matched_fields
    scores = [h.score for h in result.results]
    assert scores == sorted(scores, reverse=True)  # type: ignore[type-var]
    assert all(s is not None and 0 < s <= 100 for s in scores)


def test_typos_and_word_order_do_not_change_the_top_hit(library: Library) -> None:
    exact = search_incidents("bloom slow gpu", limit=1, library=library).results[0].id
    assert search_incidents("gpu slow blom", limit=1, library=library).results[0].id == exact


def test_title_hits_outrank_body_hits() -> None:
    def case(cid: str, title: str, summary: str) -> Case:
        return Case.model_validate({
            "id": cid, "slug": cid.lower(), "title": title, "organization": "Org", "date": "2024",
            "summary": summary, "category": "other", "sources": [{"url": "https://e.org/x", "type": "blog"}],
        })

    lib = Library(
        [
            case("IL-0001", "Something unrelated happened to a cluster",
                 "The zanzibar effect was seen in the body " * 2),
            case("IL-0002", "Zanzibar effect slowed training by 5%",
                 "A longer body that mentions nothing relevant."),
        ],
        {"t": Topic(name="t", title="T", description="d")},
    )
    result = search_incidents("zanzibar effect", library=lib)
    assert [h.id for h in result.results] == ["IL-0002", "IL-0001"]
    assert result.results[0].matched_fields[0] == "title"


def test_a_case_id_in_the_query_finds_that_case(library: Library) -> None:
    result = search_incidents("what happened in il-0458", library=library)
    assert result.results[0].id == "IL-0458"
    assert result.results[0].reasons[0] == "'IL-0458' is the case id"


def test_a_phrase_named_outright_beats_a_synonym_only_match(library: Library) -> None:
    # "lemon node" maps to faulty-machine, but the case that talks about lemon nodes comes first
    assert search_incidents("lemon node", limit=1, library=library).results[0].id == "IL-0430"


def test_pagination_is_consistent(library: Library) -> None:
    first = search_incidents("gpu", limit=5, library=library)
    assert first.total > 10 and first.next_offset == 5
    seen = [h.id for h in first.results]
    offset = first.next_offset
    while offset is not None:
        page = search_incidents("gpu", limit=5, offset=offset, library=library)
        assert page.total == first.total
        seen += [h.id for h in page.results]
        offset = page.next_offset
    assert len(seen) == len(set(seen)) == first.total
    past = search_incidents("gpu", limit=5, offset=first.total + 5, library=library)
    assert past.results == [] and past.next_offset is None and "past the last match" in (past.message or "")


def test_filters_narrow_the_results(library: Library) -> None:
    r = search_incidents("slow", cause="faulty-machine", org="bigscience", library=library)
    assert r.total >= 1 and all("faulty-machine" in h.causes for h in r.results)
    assert all(library.get(h.id).organization.lower().find("bigscience") >= 0 for h in r.results)
    r = search_incidents("checkpoint", year_from=2024, year_to=2024, library=library)
    assert r.total >= 1 and all(library.get(h.id).year == 2024 for h in r.results)
    r = search_incidents("gc", topic="python-gc", tag="python-gc", category="gc-pause", library=library)
    assert {h.id for h in r.results} <= {c.id for c in library.cases.values() if c.category == "gc-pause"}
    assert r.total >= 3


def test_a_date_range_case_overlaps_year_filters(library: Library) -> None:
    # IL-0465 spans 2020-04 to 2024-04
    assert "IL-0465" in [h.id for h in list_incidents({"year_from": 2022, "year_to": 2022},
                                                     limit=100, library=library).results]


def test_empty_results_say_so(library: Library) -> None:
    r = search_incidents("qqqxxzz wobble", library=library)
    assert r.total == 0 and r.results == [] and r.next_offset is None
    assert r.message == "No incidents match the query 'qqqxxzz wobble'."
    r = search_incidents("gc", org="nobody-at-all", library=library)
    assert r.total == 0 and "org=nobody-at-all" in (r.message or "")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"category": "gpu"}, "unknown category 'gpu'"),
        ({"cause": "gcpause"}, "unknown cause id 'gcpause' \\(did you mean gc-pause"),
        ({"tag": "pythn-gc"}, "unknown tag 'pythn-gc' \\(did you mean python-gc"),
        ({"year_from": 2025, "year_to": 2020}, "year_from \\(2025\\) is after year_to \\(2020\\)"),
        ({"year_from": 25}, "year_from must be a year"),
        ({"limit": 0}, "limit must be between 1 and 100"),
        ({"offset": -1}, "offset must be >= 0"),
        ({"org": "  "}, "org filter is empty"),
    ],
)
def test_bad_filters_raise_clear_errors(kwargs: dict[str, Any], message: str, library: Library) -> None:
    with pytest.raises(InvalidFilterError, match=message) as info:
        search_incidents("gc", library=library, **kwargs)
    assert isinstance(info.value, ValueError)


def test_unknown_topic_and_empty_query(library: Library) -> None:
    with pytest.raises(UnknownTopicError, match=r"unknown topic 'gpus'; known topics: .*stragglers"):
        search_incidents("gc", topic="gpus", library=library)
    with pytest.raises(InvalidFilterError, match="query is empty"):
        search_incidents("  ", library=library)


def test_get_incident_by_id_slug_and_errors(library: Library) -> None:
    assert get_incident("IL-0417", library=library).slug == "bytedance-straggler-study-2025"
    assert get_incident("il-0417", library=library).id == "IL-0417"
    assert get_incident("bigscience-bloom-slow-gpu-2022", library=library).id == "IL-0458"
    with pytest.raises(UnknownIncidentError) as info:
        get_incident("IL-9999", library=library)
    assert isinstance(info.value, LookupError)
    assert str(info.value) == (
        "unknown incident id 'IL-9999': the library holds 60 cases (IL-0417 .. IL-0476); "
        "ids look like IL-0417"
    )


def test_list_is_newest_first_and_filters(library: Library) -> None:
    everything = list_incidents(limit=100, library=library)
    assert everything.total == len(library)
    dates = [h.date for h in everything.results]
    assert dates[0] >= dates[-1] and all(h.score is None for h in everything.results)
    meta = list_incidents({"org": "meta"}, limit=100, library=library)
    assert meta.total >= 8 and all("meta" in h.organization.lower() for h in meta.results)
    with pytest.raises(InvalidFilterError, match="unknown filter\\(s\\) colour"):
        list_incidents({"colour": "red"}, library=library)
    none = list_incidents({"cause": "none"}, library=library)
    assert none.total == 0 and none.message == "No incidents match the filters cause=none."


def test_get_topic_lists_its_cases(library: Library) -> None:
    topic = get_topic("python-gc", library=library)
    assert topic.title and topic.description
    assert {h.id for h in topic.cases} == {"IL-0419", "IL-0422", "IL-0457", "IL-0464"}
    assert topic.total == 4
    with pytest.raises(UnknownTopicError):
        get_topic("nope", library=library)


def test_vocab_counts_match_the_library(library: Library) -> None:
    v = vocab(library=library)
    assert v.total_cases == len(library)
    assert sum(e.count for e in v.categories) == len(library)
    by_name = {e.name: e for e in v.categories}
    gpu = by_name["faulty-hardware-gpu"]
    assert gpu.count == 16 and gpu.causes == ["faulty-machine"]
    causes = {e.name: e.count for e in v.causes}
    assert causes["gc-pause"] == sum(1 for c in library.cases.values() if "gc-pause" in c.causes)
    assert {e.name for e in v.topics} == set(library.topics)
    assert v.synonyms["garbage collection"][0] == "cause:gc-pause"


def test_a_generated_library_loads_from_another_directory(tmp_path: Path, library: Library) -> None:
    cases_dir = tmp_path / "cases"
    cases_dir.mkdir()
    for case in list(library.cases.values())[:3]:
        data = case.model_dump(mode="json", exclude={"related"})
        (cases_dir / f"{case.id}.yaml").write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    other = Library.from_directory(cases_dir)  # falls back to the packaged topics file
    assert len(other) == 3
    assert search_incidents("42.5%", library=other).results[0].id == "IL-0417"
