"""Detector rules for jobs unlike the first tuning data (docs/ACCURACY.md, "Widened data"): each
test pins one mechanism with a small generated job, plus the peer helpers against simple oracles."""

from __future__ import annotations

import numpy as np

from diagnosers.detectors.peers import (
    change_point,
    log_ratios,
    noise_floor,
    partition_explains,
    peer_reference,
)
from diagnosers.diagnose import diagnose
from diagnosers.synth import CostModel, Scenario, ScenarioSpec, generate
from diagnosers.vocab import CauseId, Temporal

S = Scenario


def test_log_ratios_match_a_plain_loop() -> None:
    rng = np.random.default_rng(1)
    v = rng.uniform(1.0, 2.0, (3, 4, 2))
    got = log_ratios(v, exclude=[(2, 1)])
    for s in range(3):
        for p in range(2):
            for d in range(4):
                if (d, p) == (2, 1):
                    assert np.isnan(got[s, d, p])
                    continue
                peers = [v[s, e, p] for e in range(4) if e != d and (e, p) != (2, 1)]
                assert got[s, d, p] == np.log(v[s, d, p] / np.median(peers))


def test_peer_reference_leaves_the_candidate_out() -> None:
    v = np.ones((2, 2, 1))
    v[:, 1, 0] = 3.0  # DP 2: the slow worker would be half a pooled median
    assert np.all(peer_reference(v, [(1, 0)]) == 1.0)


def test_change_point_finds_a_clean_onset_and_not_noise() -> None:
    cp = change_point(np.array([0.0, 0.01, -0.01, 0.5, 0.52, 0.49]), sigma=0.02, min_before=2)
    assert cp is not None and cp.index == 3 and cp.z > 20
    assert change_point(np.array([0.0, 0.3, -0.1, 0.2, 0.1, 0.25]), sigma=0.02, min_before=2) is None


def test_noise_floor_reflects_step_noise() -> None:
    rng = np.random.default_rng(2)
    quiet = np.exp(rng.normal(0, 0.01, (6, 4, 2)))
    noisy = np.exp(rng.normal(0, 0.3, (6, 4, 2)))
    assert noise_floor(quiet).step < 0.03 < 0.15 < noise_floor(noisy).step


def test_partition_explains_a_stage_in_proportion_to_its_layers() -> None:
    comp = np.ones((2, 2, 3))
    comp[:, :, 1] = 2.0
    assert partition_explains(comp, [4, 8, 4], [1])
    assert not partition_explains(comp, [4, 4, 4], [1])  # same layers, twice the time: a machine


def test_machine_that_starts_throttling_inside_the_window_is_an_onset() -> None:
    spec = ScenarioSpec(
        dp=2, pp=3, steps=7, seed=21, scenarios=[S.FAULTY_MACHINE], worker=(0, 1), magnitude=1.8, onset_step=3
    )
    top = diagnose(generate(spec).trace).causes[0]
    assert top.id is CauseId.FAULTY_MACHINE and top.location.ranks == [2]
    assert top.pattern.temporal is Temporal.ONSET and top.location.steps == [3, 4, 5, 6]
    assert top.evidence["onset_step"] == 3


def test_small_dp_slow_worker_with_a_waiting_peer_is_the_worker() -> None:
    for worker in ((0, 0), (1, 1)):
        spec = ScenarioSpec(
            dp=2,
            pp=2,
            microbatches=4,
            steps=5,
            seed=22,
            scenarios=[S.FAULTY_MACHINE],
            worker=worker,
            magnitude=1.3,
        )
        job = generate(spec)
        top = diagnose(job.trace).causes[0]
        assert top.id is CauseId.FAULTY_MACHINE and top.location.ranks == job.labels.causes[0].location.ranks


def test_host_aligned_heavier_middle_stage_is_a_stage_imbalance_not_a_host() -> None:
    spec = ScenarioSpec(
        dp=8,
        pp=4,
        steps=3,
        seed=23,
        gpus_per_host=8,
        heavy_stage=2,
        scenarios=[S.STAGE_IMBALANCE_LAYERS],
        magnitude=1.5,
    )
    causes = diagnose(generate(spec).trace).causes
    assert causes[0].id is CauseId.STAGE_IMBALANCE and causes[0].location.pp_ranks == [2]
    assert CauseId.FAULTY_MACHINE not in [c.id for c in causes]


def test_job_wide_stall_is_not_gc_and_is_named_in_the_notes() -> None:
    job = generate(ScenarioSpec(dp=4, pp=3, steps=5, seed=24, scenarios=[S.JOB_STALL], magnitude=0.3))
    d = diagnose(job.trace)
    assert CauseId.GC_PAUSE not in [c.id for c in d.causes]
    assert any(n.startswith("job-wide stall") for n in d.notes)


def test_slow_worker_on_the_heavy_stage_reports_both() -> None:
    spec = ScenarioSpec(
        dp=2,
        pp=3,
        steps=4,
        seed=25,
        scenarios=[S.STAGE_IMBALANCE, S.FAULTY_MACHINE],
        worker=(1, 2),
        magnitude=1.8,
    )
    found = {c.id: c for c in diagnose(generate(spec).trace).causes}
    assert found[CauseId.FAULTY_MACHINE].location.ranks == [5]
    assert found[CauseId.STAGE_IMBALANCE].location.pp_ranks == [2]


def test_heavy_step_noise_between_identical_ranks_is_no_machine() -> None:
    for seed in (26, 27, 28):
        job = generate(ScenarioSpec(dp=4, pp=2, steps=5, seed=seed), CostModel(step_sigma=0.2, op_sigma=0.03))
        ids = [c.id for c in diagnose(job.trace).causes]
        assert CauseId.FAULTY_MACHINE not in ids and CauseId.GC_PAUSE not in ids
