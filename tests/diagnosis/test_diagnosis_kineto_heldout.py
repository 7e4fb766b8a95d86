"""Held-out recordings of the real example job (tests/data/kineto_heldout): layouts, seeds, ranks
and stages the detectors were never tuned on (dp 4 x pp 2, dp 2 x pp 3, dp 2 x pp 4; slow ranks
and stalls on later stages, GC victims drawn from other seeds, a weak slow rank). Each injected
straggler must be the top cause at the injected rank or stage; the baseline must name nothing.
See the folder's README for the exact commands and docs/ACCURACY.md for what changed because of
these recordings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diagnosers.diagnose import Diagnosis, diagnose
from diagnosers.readers import load_trace
from diagnosers.vocab import CauseId

HELDOUT = Path(__file__).resolve().parents[1] / "data" / "kineto_heldout"
_CACHE: dict[str, Diagnosis] = {}


def _diag(name: str) -> Diagnosis:
    folder = HELDOUT / name / "traces"
    # the recordings are checked in: a missing one is a broken test, not a reason to skip
    assert folder.is_dir(), f"recorded example {name} not found at {folder}"
    if name not in _CACHE:
        _CACHE[name] = diagnose(load_trace([folder]))
    return _CACHE[name]


def _injections(name: str) -> dict[str, object]:
    return json.loads((HELDOUT / name / "injections.json").read_text())  # type: ignore[no-any-return]


def _cell(name: str, rank: int) -> tuple[list[int], list[int]]:
    """(dp_ranks, pp_ranks) of a global rank in the example's order (rank = stage * dp + dp_rank)."""
    dp = int(_injections(name)["dp"])  # type: ignore[call-overload]
    return [rank % dp], [rank // dp]


def test_baseline_4x2_names_no_cause() -> None:
    d = _diag("baseline-4x2")
    assert d.causes == [], [(c.id, c.confidence) for c in d.causes]


@pytest.mark.parametrize("name", ["slow-rank-4x2", "slow-rank-weak-4x2", "slow-rank-forward-2x4"])
def test_slow_rank_is_a_faulty_machine_at_that_rank(name: str) -> None:
    rank = int(_injections(name)["slow_rank"])  # type: ignore[call-overload]
    top = _diag(name).causes[0]
    assert top.id is CauseId.FAULTY_MACHINE
    assert top.location.ranks == [rank]
    assert (top.location.dp_ranks, top.location.pp_ranks) == _cell(name, rank)


def test_last_stage_with_more_blocks_is_a_stage_imbalance() -> None:
    top = _diag("stage-imbalance-2x3").causes[0]
    assert top.id is CauseId.STAGE_IMBALANCE and top.location.pp_ranks == [2]


@pytest.mark.parametrize("name", ["gc-pause-2x3", "gc-pause-4x2"])
def test_gc_pauses_are_found_on_the_victims_and_steps(name: str) -> None:
    victims = _injections(name)["gc_victims"]
    assert isinstance(victims, dict)
    top = _diag(name).causes[0]
    assert top.id is CauseId.GC_PAUSE
    assert set(top.location.ranks) == {int(v["rank"]) for v in victims.values()}
    assert set(top.location.steps) == {int(s) for s in victims}


@pytest.mark.parametrize("name", ["dataloader-stall-4x2", "dataloader-stall-2x4"])
def test_dataloader_stall_is_on_the_stalled_rank(name: str) -> None:
    rank = int(_injections(name)["stall_rank"])  # type: ignore[call-overload]
    top = _diag(name).causes[0]
    assert top.id is CauseId.DATALOADER_STALL
    assert top.location.ranks == [rank]
    assert top.pattern.resource == "launch"


def test_slow_rank_in_a_pure_data_parallel_job() -> None:
    top = _diag("slow-rank-dp8").causes[0]
    assert top.id is CauseId.FAULTY_MACHINE and top.location.ranks == [5]


def test_slow_rank_and_gc_pauses_together_are_both_found_in_place() -> None:
    name = "mixed-slow-rank-gc-3x2"
    found = {c.id: c for c in _diag(name).causes}
    assert set(found) == {CauseId.FAULTY_MACHINE, CauseId.GC_PAUSE}
    assert found[CauseId.FAULTY_MACHINE].location.ranks == [4]
    victims = _injections(name)["gc_victims"]
    assert isinstance(victims, dict)
    gc = found[CauseId.GC_PAUSE]
    assert set(gc.location.ranks) == {int(v["rank"]) for v in victims.values()}
    assert set(gc.location.steps) == {int(s) for s in victims}
