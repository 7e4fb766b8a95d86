"""The generator's widened scenarios and options (issue: detectors on unseen jobs): onset, a
partition-heavy stage, a slow DP group, a job-wide stall, step-to-step noise, per-cause effects."""

from __future__ import annotations

import numpy as np
import pytest

from diagnosers.model import OPTYPE_CODE
from diagnosers.synth import CostModel, Scenario, ScenarioSpec, generate
from diagnosers.vocab import CauseId, Temporal

S = Scenario


def _compute_by_step(job, dp: int, pp: int) -> np.ndarray:  # type: ignore[no-untyped-def]
    ops = job.trace.ops
    m = (ops.optype == OPTYPE_CODE["forward-compute"]) | (ops.optype == OPTYPE_CODE["backward-compute"])
    steps = np.unique(ops.step)
    out = np.zeros((len(steps), dp, pp))
    np.add.at(out, (np.searchsorted(steps, ops.step[m]), ops.dp_rank[m], ops.stage[m]), ops.duration[m])
    return out


def test_onset_slows_the_worker_only_from_that_step_and_labels_it() -> None:
    spec = ScenarioSpec(
        dp=2, pp=2, steps=6, seed=3, scenarios=[S.FAULTY_MACHINE], worker=(1, 0), magnitude=2.0, onset_step=3
    )
    job = generate(spec)
    (lab,) = job.labels.causes
    assert lab.pattern.temporal is Temporal.ONSET and lab.location.steps == [3, 4, 5]
    comp = _compute_by_step(job, 2, 2)
    ratio = comp[:, 1, 0] / comp[:, 0, 0]
    assert np.all(ratio[:3] < 1.1) and np.all(ratio[3:] > 1.8)


def test_onset_outside_the_steps_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="onset_step 9 is not one of the steps"):
        ScenarioSpec(steps=4, scenarios=[S.FAULTY_MACHINE], onset_step=9)


def test_partition_heavy_stage_is_labelled_and_in_the_meta() -> None:
    spec = ScenarioSpec(dp=8, pp=3, steps=3, seed=4, scenarios=[S.STAGE_IMBALANCE_LAYERS], magnitude=1.5)
    job = generate(spec)
    (lab,) = job.labels.causes
    assert lab.id is CauseId.STAGE_IMBALANCE and lab.location.pp_ranks == [1]
    assert job.trace.meta.layers_per_stage == [7, 12, 7]
    assert lab.slowdown_alone is not None and lab.slowdown_alone > 1.05


def test_slow_dp_group_is_labelled_as_that_stage_group() -> None:
    job = generate(ScenarioSpec(dp=4, pp=2, steps=3, seed=5, scenarios=[S.SLOW_DP_GROUP], worker=(0, 1)))
    (lab,) = job.labels.causes
    assert lab.id is CauseId.SLOW_COMMUNICATION and lab.location.ranks == [4, 5, 6, 7]


def test_job_stall_has_no_cause_label_but_its_step() -> None:
    job = generate(ScenarioSpec(dp=4, pp=2, steps=4, seed=6, scenarios=[S.JOB_STALL], magnitude=0.3))
    assert job.labels.causes == [] and job.labels.job_stall_steps == [2]
    assert job.true_slowdown > 1.05
    assert set(job.labels.model_dump(mode="json")) == {"causes", "expected_straggling"}


def test_step_noise_zero_draws_exactly_the_old_numbers() -> None:
    spec = ScenarioSpec(dp=4, pp=2, steps=3, seed=7, scenarios=[S.GC_PAUSE])
    a, b = generate(spec), generate(spec, CostModel(step_sigma=0.0))
    assert np.array_equal(a.trace.ops.duration, b.trace.ops.duration)
    noisy = generate(spec, CostModel(step_sigma=0.2))
    comp = _compute_by_step(noisy, 4, 2)
    # identical ranks now differ from step to step by tens of percent
    assert float(np.std(np.log(comp[:, :, 0] / np.median(comp[:, :, 0], axis=1, keepdims=True)))) > 0.08


def test_multi_cause_labels_carry_each_effect_alone_and_marginal() -> None:
    spec = ScenarioSpec(
        dp=4, pp=4, steps=3, seed=8, scenarios=[S.STAGE_IMBALANCE, S.FAULTY_MACHINE], worker=(1, 3)
    )
    job = generate(spec)
    for lab in job.labels.causes:
        assert lab.slowdown_alone is not None and lab.marginal_slowdown is not None
        assert 1.0 < lab.slowdown_alone < job.true_slowdown
        assert 1.0 < lab.marginal_slowdown <= job.true_slowdown
    alone = generate(spec.model_copy(update={"scenarios": [S.FAULTY_MACHINE]}))
    assert job.labels.causes[1].slowdown_alone == pytest.approx(alone.true_slowdown, abs=1e-3)


def test_a_mildly_slower_healthy_gpu_is_slower_unlabelled_and_draws_nothing_else() -> None:
    # CostModel.mild_worker: one healthy GPU 3% slower (a fleet's spread, no fault): its compute is
    # 3% over what the same draw gives without it, every other op is the same, and nothing is labelled.
    spec = ScenarioSpec(dp=3, pp=2, steps=3, seed=11)
    plain = generate(spec)
    mild = generate(spec, CostModel(mild_worker=(2, 1), mild_factor=1.03))
    assert not mild.labels.causes
    a, b = _compute_by_step(plain, 3, 2), _compute_by_step(mild, 3, 2)
    assert np.allclose(b[:, 2, 1] / a[:, 2, 1], 1.03)
    other = np.ones((3, 2), dtype=bool)
    other[2, 1] = False
    assert np.allclose(b[:, other], a[:, other])
    # a cost model without it dumps as it always did (the held-out lists' fingerprints hold)
    assert "mild" not in CostModel().model_dump_json()
    with pytest.raises(ValueError, match="mild_worker"):
        generate(spec, CostModel(mild_worker=(3, 0), mild_factor=1.02))
