"""The ``straggler-lens incidents`` subcommands, run in-process through ``server.cli.main``."""

from __future__ import annotations

import json

import pytest

from server.cli import main

CONTRACT_KEYS = {"id", "title", "score", "category", "causes", "tags", "reasons"}


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    assert main(["incidents", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_search_json_follows_the_public_contract(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(capsys, "search", "garbge colection", "--limit", "2", "--json")
    assert set(out) == {"total", "results", "next_offset"}
    assert isinstance(out["total"], int) and out["total"] > 2 and out["next_offset"] == 2
    results = out["results"]
    assert isinstance(results, list) and len(results) == 2
    for hit in results:
        assert set(hit) == CONTRACT_KEYS
        assert "gc-pause" in hit["causes"] and isinstance(hit["score"], float)


def test_search_filters_and_paging_flags(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(capsys, "search", "checkpoint", "--org", "meta", "--since", "2022", "--until", "2022",
                "--category", "checkpointing-stall", "--json")
    assert [h["id"] for h in out["results"]] == ["IL-0435"]  # type: ignore[index]
    out = _json(capsys, "search", "gpu", "--limit", "3", "--offset", "3", "--json")
    assert out["next_offset"] == 6
    out = _json(capsys, "search", "slow gpu", "--cause", "faulty-machine", "--tag", "bloom", "--topic",
                "stragglers", "--json")
    assert [h["id"] for h in out["results"]] == ["IL-0458"]  # type: ignore[index]


def test_list_similar_and_show_json(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(capsys, "list", "--topic", "python-gc", "--json")
    assert out["total"] == 4 and all(h["score"] is None for h in out["results"])  # type: ignore[union-attr]
    out = _json(capsys, "similar", "IL-0458", "--limit", "3", "--json")
    assert len(out["results"]) == 3 and all(set(h) == CONTRACT_KEYS for h in out["results"])  # type: ignore[arg-type]
    case = _json(capsys, "show", "il-0417", "--json")
    assert case["id"] == "IL-0417" and case["causes"][0] == "stage-imbalance"  # type: ignore[index]
    assert any("스트래글러" in a for a in case["aliases"])  # type: ignore[union-attr]


def test_text_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["incidents", "show", "IL-0458"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("IL-0458 · BigScience") and "mitigations:" in text and "signature:" in text
    assert main(["incidents", "search", "bloom", "--limit", "1"]) == 0
    text = capsys.readouterr().out
    assert "BLOOM" in text and "why:" in text and "1 of 4 shown; next page: --offset 1" in text
    assert main(["incidents", "vocab"]) == 0
    text = capsys.readouterr().out
    assert "faulty-hardware-gpu" in text and "python-gc" in text


def test_vocab_json(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(capsys, "vocab", "--json")
    assert out["total_cases"] == 60
    assert {"categories", "causes", "tags", "topics", "synonyms"} <= set(out)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["show", "IL-9999"], "unknown incident id 'IL-9999'"),
        (["similar", "nope"], "unknown incident id 'nope'"),
        (["search", "gc", "--category", "gpu"], "unknown category 'gpu'"),
        (["list", "--cause", "gcpause"], "did you mean gc-pause"),
        (["list", "--topic", "zzz"], "unknown topic 'zzz'"),
        (["list", "--since", "2025", "--until", "2020"], "year_from (2025) is after year_to (2020)"),
        (["search", "gc", "--limit", "500"], "limit must be between 1 and 100"),
    ],
)
def test_errors_exit_2_with_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["incidents", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("straggler-lens: error: ") and message in err and err.count("\n") == 1


def test_empty_results_say_so_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["incidents", "search", "qqzzxx", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {"total": 0, "results": [], "next_offset": None}
    assert "No incidents match the query 'qqzzxx'." in captured.err
