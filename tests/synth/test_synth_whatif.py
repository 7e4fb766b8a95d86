"""Generated jobs through the what-if engine: the numbers move the way the method predicts."""

from __future__ import annotations

import numpy as np
import pytest

from diagnosers.synth import Scenario, ScenarioSpec, Schedule, generate

whatif = pytest.importorskip("diagnosers.whatif")


def _analyze(spec: ScenarioSpec):  # type: ignore[no-untyped-def]
    job = generate(spec)
    return job, whatif.analyze(job.trace)


def _worker_score(w) -> float:  # type: ignore[no-untyped-def]
    return float(w.slowdown if w.slowdown is not None else w.slowdown_estimate)


@pytest.mark.parametrize(
    "spec",
    [
        ScenarioSpec(dp=4, pp=4, microbatches=8, steps=4, seed=1),
        ScenarioSpec(dp=16, pp=2, microbatches=8, steps=3, seed=2),
        ScenarioSpec(dp=2, pp=4, microbatches=8, steps=3, schedule=Schedule.GPIPE, seed=3),
        ScenarioSpec(dp=2, pp=4, vpp=2, microbatches=8, steps=3, schedule=Schedule.INTERLEAVED, seed=4),
        ScenarioSpec(dp=2, pp=2, cp=2, tp=2, microbatches=4, steps=3, seed=5),
    ],
    ids=["1f1b", "wide", "gpipe", "interleaved", "tp-cp"],
)
def test_healthy_jobs_analyse_below_the_decomposition_threshold(spec: ScenarioSpec) -> None:
    job, rep = _analyze(spec)
    assert rep.slowdown < 1.03, rep.slowdown
    assert job.labels.expected_straggling is False
    # the engine's simulation reproduces our own executor's step times within a few percent
    assert 0.0 <= rep.simulation_error < 0.05


def test_a_worker_twice_as_slow_tops_the_per_worker_ranking() -> None:
    spec = ScenarioSpec(dp=4, pp=4, microbatches=8, steps=3, scenarios=[Scenario.FAULTY_MACHINE],
                        worker=(2, 1), magnitude=2.0, seed=7)
    job, rep = _analyze(spec)
    ranking = sorted(rep.attribution.by_worker, key=_worker_score, reverse=True)
    assert (ranking[0].dp_rank, ranking[0].pp_rank) == (2, 1)
    assert rep.straggling and job.labels.expected_straggling
    assert rep.m_w is not None and rep.m_w > 0.5


def test_a_heavy_last_stage_tops_the_by_stage_attribution() -> None:
    spec = ScenarioSpec(dp=2, pp=4, microbatches=8, steps=4, scenarios=[Scenario.STAGE_IMBALANCE], seed=8)
    job, rep = _analyze(spec)
    by_stage = rep.attribution.by_stage
    assert max(by_stage, key=lambda k: by_stage[k]) == "3"
    assert rep.slowdown > 1.1 and job.labels.expected_straggling
    assert rep.m_s is not None and rep.m_s > 0.5


def test_a_heavy_first_stage_tops_the_by_stage_attribution() -> None:
    spec = ScenarioSpec(dp=2, pp=4, microbatches=8, steps=3, scenarios=[Scenario.STAGE_IMBALANCE_FIRST],
                        seed=9)
    _, rep = _analyze(spec)
    by_stage = rep.attribution.by_stage
    assert max(by_stage, key=lambda k: by_stage[k]) == "0"


def test_long_tailed_sequence_lengths_warm_every_dp_rank() -> None:
    spec = ScenarioSpec(dp=16, pp=2, microbatches=8, steps=4,
                        scenarios=[Scenario.SEQUENCE_LENGTH_IMBALANCE], seed=10)
    _, rep = _analyze(spec)
    assert rep.slowdown > 1.1
    at = rep.attribution
    # both PP rows are warm, so every heatmap cell min(S_dp, S_pp) is decided by its DP column
    assert min(at.by_stage.values()) > 1.05
    dp_scores = np.array(list(at.by_dp_rank.values()))
    assert (dp_scores > 1.01).mean() >= 0.75
    # no few workers explain it: fixing the slowest 3% removes well under half
    assert rep.m_w is not None and rep.m_w < 0.5
    # and the slowest DP rank moves from step to step
    per_step = at.by_dp_rank_per_step
    tops = {max(v, key=lambda k: v[k]) for v in per_step.values()}
    assert len(tops) >= 2


def test_a_dataloader_stall_shows_in_launch_slowdown_not_in_s() -> None:
    base = ScenarioSpec(dp=4, pp=4, microbatches=8, steps=4, seed=11)
    _, healthy = _analyze(base)
    job, stalled = _analyze(base.model_copy(update={"scenarios": [Scenario.DATALOADER_STALL]}))
    assert stalled.slowdown == pytest.approx(healthy.slowdown, abs=0.01)
    assert stalled.slowdown < 1.03
    assert stalled.launch_slowdown > healthy.launch_slowdown + 0.1
    assert job.labels.expected_straggling is False


def test_gc_pauses_are_straggling_on_the_labelled_steps() -> None:
    spec = ScenarioSpec(dp=4, pp=4, microbatches=8, steps=6, scenarios=[Scenario.GC_PAUSE], seed=12)
    job, rep = _analyze(spec)
    hit = {str(s) for s in job.labels.causes[0].location.steps}
    slow = {k for k, v in rep.step_slowdown.items() if v > 1.05}
    assert slow and slow <= hit


def test_a_slow_link_puts_its_dp_rank_on_top() -> None:
    spec = ScenarioSpec(dp=4, pp=4, microbatches=8, steps=3, scenarios=[Scenario.SLOW_COMMUNICATION],
                        magnitude=20.0, seed=1)
    job, rep = _analyze(spec)
    (d,) = job.labels.causes[0].location.dp_ranks
    by_dp = rep.attribution.by_dp_rank
    assert max(by_dp, key=lambda k: by_dp[k]) == str(d)
    assert rep.attribution.by_optype.get("forward-pp-comm", 1.0) > 1.0 or rep.attribution.by_optype.get(
        "backward-pp-comm", 1.0) > 1.0
