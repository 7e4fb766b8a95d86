"""The packaged case files: every file validates, every cross-reference resolves, the facts of the
seed sheet carry over (numbers, sources, "unverified" markers) in our own wording."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import pytest
import yaml

from diagnosers.vocab import CATEGORY_TO_CAUSES, CauseId
from incidents import CaseFileError, Library
from incidents.library import DEFAULT_CASES_DIR, DEFAULT_TOPICS_FILE, load_topics, parse_case
from incidents.schema import CONDITIONAL_CATEGORIES

FACT_SHEET = Path("/work/shared/research/incident_facts.jsonl")
KOREAN_TITLE = (
    "ByteDance LLM 학습 클러스터에서 작업의 42.5% 가 스트래글러 때문에 "
    "10% 넘게 느려졌고 GPU 시간 10.4% 가 낭비되었다"
)


def test_every_case_file_validates_and_cross_references_resolve() -> None:
    lib = Library.from_directory(DEFAULT_CASES_DIR, DEFAULT_TOPICS_FILE)
    files = sorted(DEFAULT_CASES_DIR.glob("*.yaml"))
    assert len(files) == len(lib) >= 60
    for path in files:
        case = parse_case(yaml.safe_load(path.read_text(encoding="utf-8")), file=str(path))
        assert path.stem == case.id
        assert case.sources and all(s.url.startswith("http") for s in case.sources)
        for rel in case.related:
            assert rel in lib.cases, f"{case.id}: related {rel} missing"
        for topic in case.topics:
            assert topic in lib.topics, f"{case.id}: topic {topic} missing"
        assert case.category in CATEGORY_TO_CAUSES
        if case.category not in CONDITIONAL_CATEGORIES:
            assert set(CATEGORY_TO_CAUSES[case.category]) <= set(case.causes)
        assert all(isinstance(c, CauseId) and c is not CauseId.NONE for c in case.causes)
        assert {s.cause for s in case.signature} <= set(case.causes)


def test_every_topic_has_cases_and_case_files_ship_inside_the_package(library: Library) -> None:
    used = {t for c in library.cases.values() for t in c.topics}
    assert used == set(load_topics(DEFAULT_TOPICS_FILE))
    packaged = resources.files("incidents") / "cases"
    assert len([p for p in packaged.iterdir() if p.name.endswith(".yaml")]) == len(library)
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text(encoding="utf-8")
    assert '"*.yaml"' in pyproject  # package data covers the case and topic files


def test_il_0417_keeps_its_korean_title_as_an_alias(library: Library) -> None:
    case = library.get("IL-0417")
    assert KOREAN_TITLE in case.aliases
    assert "42.5%" in case.title and "10.4%" in case.title
    assert case.sources[0].url == "https://arxiv.org/abs/2505.05713"


@pytest.mark.skipif(not FACT_SHEET.is_file(), reason="fact sheet not available on this machine")
def test_cases_carry_the_fact_sheet_over_in_our_own_words(library: Library) -> None:
    records = [json.loads(line) for line in FACT_SHEET.read_text(encoding="utf-8").splitlines() if line]
    by_slug = {c.slug: c for c in library.cases.values()}
    assert {r["id"] for r in records} <= set(by_slug)
    for rec in records:
        case = by_slug[rec["id"]]
        text = (DEFAULT_CASES_DIR / f"{case.id}.yaml").read_text(encoding="utf-8")
        assert case.category == rec["category"]
        assert {s.url for s in case.sources} <= set(rec["sources"]), case.id
        assert case.sources[0].url == rec["sources"][0]
        if any("unverified" in f for f in rec["facts"]) or "unverified" in rec["date"]:
            assert "unverified" in text, f"{case.id} lost its unverified marker"
        # sentences do not carry over: no 9-word run of a fact or of the fact-sheet title appears verbatim
        for fact in [*rec["facts"], rec["title"]]:
            words = fact.split()
            for i in range(0, max(len(words) - 9, 0) + 1):
                run = " ".join(words[i: i + 9])
                assert len(words) < 9 or run not in text, f"{case.id} copies: {run!r}"
        # the headline numbers of the fact-sheet title survive somewhere in the case
        for num in re.findall(r"\d+(?:\.\d+)?%", rec["title"]):
            assert num in text, f"{case.id} lost {num}"


def test_a_broken_case_names_its_file_and_field(
    write_cases: Callable[..., Path], make_case: Callable[..., dict[str, object]]
) -> None:
    cases_dir = write_cases(make_case("IL-0001", category="gpu-melted"))
    with pytest.raises(CaseFileError, match=r"IL-0001\.yaml: category: .*unknown category 'gpu-melted'"):
        Library.from_directory(cases_dir)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"related": ["IL-0999"]}, "related case IL-0999 does not exist"),
        ({"topics": ["no-such-topic"]}, "topic 'no-such-topic' is not defined"),
        ({"category": "gc-pause", "causes": []}, "maps to \\['gc-pause'\\], but causes lack"),
        ({"causes": ["gc-pause"], "signature": [{"cause": "faulty-machine"}]}, "not in causes"),
        ({"causes": ["not-a-cause"]}, "causes.0"),
        ({"sources": []}, "sources: List should have at least 1 item"),
        ({"sources": [{"url": "ftp://x", "type": "blog"}]}, "not an http"),
        ({"date": "May 2024"}, "date must be"),
        ({"id": "IL-1"}, "id must look like IL-0417"),
        ({"surprise": 1}, "surprise: Extra inputs are not permitted"),
    ],
)
def test_invalid_cases_are_refused_with_a_precise_message(
    write_cases: Callable[..., Path], make_case: Callable[..., dict[str, object]],
    overrides: dict[str, object], message: str,
) -> None:
    case = make_case("IL-0001", **overrides)
    names = ["IL-0001.yaml"]
    cases_dir = write_cases(case, names=names)
    with pytest.raises(CaseFileError, match=message):
        Library.from_directory(cases_dir)


def test_file_name_must_match_the_id(
    write_cases: Callable[..., Path], make_case: Callable[..., dict[str, object]]
) -> None:
    cases_dir = write_cases(make_case("IL-0002"), names=["IL-0003.yaml"])
    with pytest.raises(CaseFileError, match="file name says IL-0003 but the case id is IL-0002"):
        Library.from_directory(cases_dir)


def test_bad_yaml_and_missing_directory(
    write_cases: Callable[..., Path], make_case: Callable[..., dict[str, object]], tmp_path: Path
) -> None:
    cases_dir = write_cases(make_case("IL-0001"))
    (cases_dir / "IL-0001.yaml").write_text("id: [unclosed", encoding="utf-8")
    with pytest.raises(CaseFileError, match=r"IL-0001\.yaml: invalid YAML"):
        Library.from_directory(cases_dir)
    with pytest.raises(FileNotFoundError, match="incident cases directory not found"):
        Library.from_directory(tmp_path / "nowhere")


def test_a_valid_directory_loads_with_its_own_topics(
    write_cases: Callable[..., Path], make_case: Callable[..., dict[str, object]]
) -> None:
    cases_dir = write_cases(
        make_case("IL-0001", topics=["stragglers"], related=["IL-0002"]),
        make_case("IL-0002", date=2023),
    )
    lib = Library.from_directory(cases_dir)
    assert list(lib.cases) == ["IL-0001", "IL-0002"]
    assert lib.get("il-0002").date == "2023"
    assert lib.get("test-il-0001").id == "IL-0001"  # slug lookup


def test_conditional_categories_need_no_cause(
    write_cases: Callable[..., Path], make_case: Callable[..., dict[str, object]]
) -> None:
    # thermal swings or CPU contention on every host are not a faulty machine (only one slow host is)
    cases_dir = write_cases(
        make_case("IL-0001", category="thermal-or-power-throttling"),
        make_case("IL-0002", category="host-cpu-contention", causes=["faulty-machine"]),
    )
    lib = Library.from_directory(cases_dir)
    assert lib.get("IL-0001").causes == [] and lib.get("IL-0002").causes == [CauseId.FAULTY_MACHINE]
