"""Recorded PyTorch-profiler traces of a real DP x PP job (tests/data/kineto_example): each injected
straggler is diagnosed as the right cause at the right place, and the baseline names no worker,
stage or network. These traces were first run after the detectors were written; the rule changes
they led to are listed in docs/ACCURACY.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosers.diagnose import Diagnosis, diagnose
from diagnosers.readers import load_trace
from diagnosers.vocab import CauseId

EXAMPLES = Path(__file__).resolve().parents[1] / "data" / "kineto_example"
_CACHE: dict[str, Diagnosis] = {}


def _diag(name: str) -> Diagnosis:
    folder = EXAMPLES / name / "traces"
    # the recordings are checked in: a missing one is a broken test, not a reason to skip
    assert folder.is_dir(), f"recorded example {name} not found at {folder}"
    if name not in _CACHE:
        _CACHE[name] = diagnose(load_trace([folder]))
    return _CACHE[name]


def _ids(d: Diagnosis) -> list[CauseId]:
    return [c.id for c in d.causes]


def test_baseline_names_no_worker_stage_or_machine() -> None:
    d = _diag("baseline")
    assert not {CauseId.FAULTY_MACHINE, CauseId.STAGE_IMBALANCE, CauseId.SLOW_COMMUNICATION} & set(_ids(d))


@pytest.mark.parametrize("name", ["slow-rank", "slow-rank-forward"])
def test_slow_rank_is_a_faulty_machine_at_dp1_pp0(name: str) -> None:
    top = _diag(name).causes[0]
    assert top.id is CauseId.FAULTY_MACHINE
    assert (top.location.dp_ranks, top.location.pp_ranks, top.location.ranks) == ([1], [0], [1])


def test_stage_imbalance_is_the_last_stage() -> None:
    top = _diag("stage-imbalance").causes[0]
    assert top.id is CauseId.STAGE_IMBALANCE and top.location.pp_ranks == [1]


def test_gc_pause_is_sporadic_on_the_paused_workers_and_steps() -> None:
    top = _diag("gc-pause").causes[0]
    assert top.id is CauseId.GC_PAUSE
    assert top.location.pp_ranks == [1] and set(top.location.steps) == {2, 5}


def test_dataloader_stall_is_on_rank_1() -> None:
    top = _diag("dataloader-stall").causes[0]
    assert top.id is CauseId.DATALOADER_STALL
    assert top.location.ranks == [1]
    assert top.pattern.resource == "launch"
