"""The recorded example traces (tests/data/kineto_example): each injected straggler is found.

The traces are real torch.profiler output of examples/pp_dp_train.py (dp=2, pp=2, gloo, CPU);
README.md in that folder lists what was injected where. Rank r sits at dp_rank r % 2, stage r // 2.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from diagnosers.diagnose import Diagnosis, diagnose
from diagnosers.model import Trace
from diagnosers.readers import load_trace
from diagnosers.vocab import CauseId

DATA = Path(__file__).resolve().parents[1] / "data" / "kineto_example"


@cache
def _load(name: str) -> tuple[Trace, Diagnosis, dict[str, object]]:
    trace = load_trace([DATA / name / "traces"])
    injections = json.loads((DATA / name / "injections.json").read_text())
    return trace, diagnose(trace), injections


def _top(d: Diagnosis) -> tuple[CauseId, list[int], list[int], list[int]]:
    c = d.causes[0]
    return c.id, c.location.dp_ranks, c.location.pp_ranks, c.location.ranks


@pytest.mark.parametrize(
    "name",
    ["baseline", "slow-rank", "slow-rank-forward", "stage-imbalance", "gc-pause", "dataloader-stall"],
)
def test_every_recorded_set_reads_as_a_2x2_pipeline(name: str) -> None:
    trace, _, inj = _load(name)
    assert (trace.meta.dp, trace.meta.pp) == (2, 2)
    assert trace.steps == inj["profiled_steps"]
    assert any("pg_config" in n for n in trace.notes)
    names = trace.ops.optype_names()
    # 1F1B with 4 microbatches: 4 forward and 4 backward computes per worker and step
    for r in range(4):
        m = (trace.ops.rank == r) & (trace.ops.step == trace.steps[0])
        assert (names[m] == "forward-compute").sum() == 4 and (names[m] == "backward-compute").sum() == 4
    # batched P2P were split: every stage-0 forward-send pairs with a stage-1 forward-recv
    fs = ((names == "forward-send") & (trace.ops.stage == 0)).sum()
    fr = ((names == "forward-recv") & (trace.ops.stage == 1)).sum()
    assert fs == fr == 4 * 2 * len(trace.steps)


def test_baseline_is_not_a_straggling_job() -> None:
    _, d, _ = _load("baseline")
    assert not d.straggling and d.slowdown < 1.1


def test_slow_rank_is_found_as_one_slow_worker() -> None:
    # a slow machine: every compute type of rank 1 is slower (forward, backward, optimizer)
    _, d, inj = _load("slow-rank")
    assert inj["slow_rank"] == 1 and inj["slow_forward_only"] is False
    cause, dps, pps, ranks = _top(d)
    assert cause is CauseId.FAULTY_MACHINE
    assert (dps, pps, ranks) == ([1], [0], [1])
    worst = max(d.report.attribution.by_worker, key=lambda w: w.slowdown or 0.0)
    assert (worst.dp_rank, worst.pp_rank) == (1, 0)


def test_forward_only_slow_rank_is_found_as_one_slow_worker() -> None:
    # rank 1 sleeps 40 ms in each forward only: the what-if report blames that worker and forward
    _, d, inj = _load("slow-rank-forward")
    assert inj["slow_rank"] == 1 and inj["slow_forward_only"] is True
    rep = d.report
    assert rep.straggling
    worst = max(rep.attribution.by_worker, key=lambda w: w.slowdown or 0.0)
    assert (worst.dp_rank, worst.pp_rank) == (1, 0)
    assert max(rep.attribution.by_dp_rank, key=rep.attribution.by_dp_rank.__getitem__) == "1"
    assert max(rep.attribution.by_optype, key=rep.attribution.by_optype.__getitem__) == "forward-compute"
    others = [w.slowdown or 0.0 for w in rep.attribution.by_worker if (w.dp_rank, w.pp_rank) != (1, 0)]
    assert (worst.slowdown or 0.0) - 1.0 > 5 * (max(others) - 1.0)
    # and the diagnosis names one slow worker there
    cause, dps, pps, ranks = _top(d)
    assert cause is CauseId.FAULTY_MACHINE and (dps, pps, ranks) == ([1], [0], [1])


def test_heavy_last_stage_is_found_as_stage_imbalance() -> None:
    _, d, inj = _load("stage-imbalance")
    assert inj["last_stage_layers"] == 4
    cause, _, pps, _ = _top(d)
    assert cause is CauseId.STAGE_IMBALANCE and pps == [1]
    by_stage = d.report.attribution.by_stage
    assert max(by_stage, key=by_stage.__getitem__) == "1"


def test_gc_pauses_are_found_on_the_victim_steps_and_workers() -> None:
    trace, d, inj = _load("gc-pause")
    victims = {int(s): v["rank"] for s, v in inj["gc_victims"].items()}  # type: ignore[attr-defined]
    assert victims == {2: 2, 5: 3}
    cause, _, _, ranks = _top(d)
    assert cause is CauseId.GC_PAUSE
    assert d.causes[0].location.steps == sorted(victims)
    assert set(ranks) == set(victims.values())
    # per step, the victim's DP rank is the one that costs the step
    per_step = d.report.attribution.by_dp_rank_per_step
    for step, rank in victims.items():
        row = per_step[str(step)]
        assert max(row, key=row.__getitem__) == str(rank % 2)
    # and the longest forward-compute of each victim step is the victim's
    names = trace.ops.optype_names()
    for step, rank in victims.items():
        m = (names == "forward-compute") & (trace.ops.step == step)
        assert int(trace.ops.rank[m][np.argmax(trace.ops.duration[m])]) == rank


def test_dataloader_stall_is_found_on_the_stalled_rank() -> None:
    _, d, inj = _load("dataloader-stall")
    assert inj["stall_rank"] == 1
    cause, dps, pps, ranks = _top(d)
    assert cause is CauseId.DATALOADER_STALL
    assert (dps, pps, ranks) == ([1], [0], [1])
    # op durations stay normal: the stall lives in the launch gap, not in the simulated slowdown
    assert d.report.launch_slowdown > 1.5 and d.report.slowdown < 1.2


def test_pipeline_layout_is_inferred_without_named_groups(tmp_path: Path) -> None:
    # the same recording with pg_config removed (groups created without group_desc)
    import gzip

    for src in sorted((DATA / "slow-rank" / "traces").glob("*.json.gz")):
        with gzip.open(src, "rt") as fh:
            d = json.load(fh)
        del d["distributedInfo"]["pg_config"]
        with gzip.open(tmp_path / src.name, "wt") as fh:
            json.dump(d, fh)
    ref, _, _ = _load("slow-rank")
    trace = load_trace([tmp_path])
    assert (trace.meta.dp, trace.meta.pp) == (2, 2)
    assert any("never receive activations" in n for n in trace.notes)
    assert np.array_equal(trace.ops.stage, ref.ops.stage)
    assert np.array_equal(trace.ops.dp_rank, ref.ops.dp_rank)
    assert np.array_equal(trace.ops.duration, ref.ops.duration)
