"""Held-out synthetic set 3 (``bench/heldout3.py``; docs/ACCURACY.md, "Held-out set 3").

The set was committed before its one fresh run; the list must not move afterwards, so its
fingerprint is pinned here. The jobs its fresh run missed because of a generalisation bug are
pinned one by one with what they give now (each fails on the rules as they were at that run), and
a slice of the set (the first job of every family and mix group) is pinned at the figures it
gives after the fixes — a second look at seen data, not the fresh figure, which the docs keep.
Every job is deterministic to generate and diagnose, so a drop is a rule change, not noise.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy as np
import pytest

from diagnosers.diagnose import diagnose
from diagnosers.model import OPTYPES
from diagnosers.synth import generate

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import heldout3  # noqa: E402

# sha256 of every case's name, spec, cost model and stall, in order (see test_the_list_is_the_committed_one)
FINGERPRINT = "ebf1876859c23dc2503d402e77afe93dc222de4320d1cf579dec320cec13a54d"
CASES = {c.name: c for c in heldout3.set3_cases()}


def _outcome(name: str) -> heldout3.H3Outcome:
    case = CASES[name]
    job = generate(case.spec, case.cost)
    return heldout3.score(case, job, diagnose(job.trace))


def _fingerprint(which: int | str) -> str:
    text = "\n".join(
        f"{c.name} {c.spec.model_dump_json()} {c.cost.model_dump_json()} {c.stall!r}"
        for c in heldout3.set3_cases(which)
    )
    return hashlib.sha256(text.encode()).hexdigest()


def test_the_list_is_the_committed_one() -> None:
    assert len(CASES) == 228
    assert _fingerprint(3) == FINGERPRINT


# Set 5 (new shapes, three more healthy families) and its tuning companion, fixed before the round's
# first rule change; set 5 is run once at the end of the round.
SET5_FINGERPRINT = "29e7ebeed968f017736d7ae5f63985e90737f7bf537beb65ed9969aa1dbed5e6"
TUNE5_FINGERPRINT = "756cdf7cc054e8c4bc9722558361c1a94b64274709d0cec9b0807951f3c2e1d1"


def test_set_5_and_its_tuning_list_are_the_committed_ones() -> None:
    assert len(heldout3.set3_cases(5)) == len(heldout3.set3_cases("tune5")) == 264
    assert _fingerprint(5) == SET5_FINGERPRINT
    assert _fingerprint("tune5") == TUNE5_FINGERPRINT
    healthy = [c for c in heldout3.set3_cases(5) if c.family.startswith(("healthy", "job-stall"))]
    assert len(healthy) == 72


@pytest.mark.parametrize(
    "name",
    [
        # a job-wide stall of a two-worker job (dp 1 x pp 2), the only pauses in 12 / 10 steps; the
        # second also named a "faulty machine" whose compute ran 1.00x the other stage's
        "job-stall-6",
        "job-stall-11",
    ],
)
def test_no_machine_or_gc_on_a_healthy_or_stalled_job(name: str) -> None:
    o = _outcome(name)
    assert o.healthy and o.top1_ok and not o.false_machine_or_gc, o.got


def test_the_slowest_gpu_of_a_noisy_healthy_fleet_is_no_machine() -> None:
    # healthy-noisy-8: a GPU 2.6% slower than its peers, the slowest of 18 noisy healthy ones (dp 3),
    # stood 7.4 "sigma" out of the others' MAD (each of them against a stage median holding itself)
    # and was named faulty-machine 0.566 (the test pinned that until the set-5 round). Against the
    # fleet's own persistent spread (``NoiseFloor.fleet_sigma``, each worker left out of its own
    # reference, read from 17 workers) it is 3.7 sigma out, under the bar for 18 workers (4.4):
    # nothing is named now (docs/ACCURACY.md, "Held-out set 5").
    o = _outcome("healthy-noisy-8")
    assert o.got == [] and o.top1_ok and not o.false_machine_or_gc


@pytest.mark.parametrize(
    ("name", "top"),
    [
        # a slow worker on a stage the partition makes heavy: the stage's per-layer compute is read
        # without the slow machine (it was 30% over the others' with it, so "not the partition")
        ("faulty-on-heavy-9", "stage-imbalance"),
        # (the machine first since the stage's weight is read without its steps: true marginals
        # 2.42 for the machine, 1.67 for the stage; the stage's gain 1.61, the machine's 2.44)
        ("faulty-on-heavy-7", "faulty-machine"),
        ("faulty-on-heavy-2", "faulty-machine"),
        # ... and a heavier last stage (12% alone) beside a 2.3x faulty GPU on it: 7% of the job's
        # loss, under MIN_SHARE, but 12% of the ideal step on its own (base.real_share)
        ("faulty-on-heavy-3", "faulty-machine"),
        # a slow worker NIC of a middle stage (GPipe): both its links are slow, so it is the NIC, not
        # one link; with dp 2 the worker now stands out of its one peer, not of a median holding it
        ("slow-nic-9", "slow-communication"),
        ("slow-nic-4", "slow-communication"),
        # a slow host NIC whose two workers sit on two stages and two replicas
        ("slow-nic-7", "slow-communication"),
        # GC pauses where one worker met its own microbatch twice in a 3-step window by chance
        ("gc-5", "gc-pause"),
        # (silent before: S = 1.33 and nothing named); its first-stage imbalance (10% alone) is
        # found beside the pauses as a secondary (base.real_share)
        ("mix2-gc-pause+stage-imbalance-first-17", "gc-pause"),
    ],
)
def test_fresh_run_misses_now_found_in_place(name: str, top: str) -> None:
    o = _outcome(name)
    assert o.top1_ok and o.got[0][0] == top, o.got
    assert not o.false_machine_or_gc
    if name.startswith(("faulty-on-heavy", "mix2")):
        assert o.found == o.wanted == 2, o.got  # both causes, each at its place


def test_set4_one_dp_rank_heavier_stage_is_no_faulty_machine() -> None:
    # set 4, after its one run: one DP rank, ten stages, the partition gives stage 6 1.6x the layers
    # and its compute follows them; the machine test (stages compared, no DP peers) named it
    # faulty-machine first. Now left to the stage imbalance, as a host that is whole stages is.
    case = {c.name: c for c in heldout3.set3_cases(4)}["stage-layers-8"]
    job = generate(case.spec, case.cost)
    o = heldout3.score(case, job, diagnose(job.trace))
    assert [g[:3] for g in o.got] == [("stage-imbalance", 0.99, [6])]


def test_a_slice_of_set_3_at_its_second_look_figures() -> None:
    outcomes = heldout3.run(heldout3.subset(1))
    s = heldout3.summarize(outcomes)
    assert s["jobs"] == 19
    # second look (after the fixes): every clear job of the slice right; of the three multi-cause
    # jobs' 7 clear causes, 6 found (the launch stall of mix3-0, 5% of its step beside a slow DP
    # collective and sequence lengths, is not: under MIN_SHARE); no machine or GC on the healthy
    # and stalled ones
    assert s["top1_clear_right"] == s["clear_jobs"] == 19, s["misses"]
    assert s["multi_cause_found"] == "6 of 7", s["misses"]
    assert s["healthy_jobs"] == 3 and s["healthy_with_faulty_or_gc"] == 0


# --- the set-5 round: rules changed on set 4's second look and the tuning companion (tune5) -------


def _outcome_of(which: int | str, name: str) -> heldout3.H3Outcome:
    case = {c.name: c for c in heldout3.set3_cases(which)}[name]
    job = generate(case.spec, case.cost)
    return heldout3.score(case, job, diagnose(job.trace))


@pytest.mark.parametrize(
    ("which", "name"),
    [
        # two workers stopped for the same time in the one paused step of a 3-step window (under
        # PAIR_STALL_STEPS): one stall of the job, no GC pause (gc_pause.PAIR_STALL_SAME_LENGTH)
        (4, "job-stall-10"),
        ("tune5", "job-stall-small-3"),  # under +-29% step noise
        ("tune5", "job-stall-small-10"),
        # dp 1 x pp 8, op sigma 7%: a 2% "onset" on a floor of 0.5% (no peer pair to read the noise
        # from); the successive-step spread of each stage against the others reads it
        ("tune5", "healthy-noisy-5"),
    ],
)
def test_set5_round_healthy_and_stalled_jobs_name_no_machine_or_gc(which: int | str, name: str) -> None:
    o = _outcome_of(which, name)
    assert o.healthy and o.top1_ok and not o.false_machine_or_gc, o.got


def test_set5_round_a_heavier_middle_stage_of_few_layers_is_the_partition() -> None:
    # one DP rank, layers [3, 4, 7, 3]: the end stages carry the embedding and the head, so their
    # compute per layer runs a third over a middle stage's; the heavy stage's ran 25% *under* theirs
    # and the partition test (within 15% either way) refused it, so it was named faulty-machine.
    o = _outcome_of("tune5", "stage-layers-2")
    assert [g[:3] for g in o.got] == [("stage-imbalance", 0.99, [8])]


def test_successive_step_spread_reads_a_pairs_noise_and_ignores_a_persistent_or_onset_shift() -> None:
    from diagnosers.detectors.peers import MIN_SIGMA, successive_step_spread

    rng = np.random.default_rng(5)
    noisy = np.exp(rng.normal(0.0, 0.2, (40, 2, 1)))
    # a pair's log ratio moves by sqrt(2) x 0.2 from step to step
    assert successive_step_spread(noisy) == pytest.approx(0.2 * np.sqrt(2.0), rel=0.25)
    flat = np.ones((8, 2, 1))
    flat[:, 1, 0] = 1.5  # persistently 1.5x: no step noise at all
    assert successive_step_spread(flat) == MIN_SIGMA
    flat[4:, 1, 0] = 3.0  # an onset moves the ratio once: the median of the differences passes over it
    assert successive_step_spread(flat) == MIN_SIGMA
    assert successive_step_spread(np.ones((2, 2, 1))) == MIN_SIGMA  # two steps: nothing to read


def test_fleet_sigma_is_the_workers_spread_less_step_noise_and_needs_eight_workers() -> None:
    from diagnosers.detectors.peers import NoiseFloor

    # typical ratios spread 1.5%; a 2% step floor over 16 steps (read 0.92 of the per-step sigma by
    # the MAD around each worker's median) gives a typical 0.68% of it
    f = NoiseFloor(step=0.02, worker=0.015, n_steps=16, n_workers=17)
    step_typical = 0.02 / (1.0 - 1.25 / 16) * 1.25 / 4
    assert f.fleet_sigma() == pytest.approx(np.sqrt(0.015**2 - step_typical**2))
    assert NoiseFloor(step=0.2, worker=0.01, n_steps=4, n_workers=17).fleet_sigma() == 0.0  # all step noise
    # a spread only 1.3x what step noise gives it: the MAD's own sampling error, no fleet spread
    assert NoiseFloor(step=0.1523, worker=0.17, n_steps=4, n_workers=11).fleet_sigma() == 0.0
    # too few workers to read a spread from
    assert NoiseFloor(step=0.02, worker=0.015, n_steps=16, n_workers=7).fleet_sigma() == 0.0


def test_a_slice_of_set_5_at_its_figures() -> None:
    # set 5 was run once at the end of its round (docs/ACCURACY.md, "Held-out set 5"); the first job
    # of every family and mix group, with the rules as they are now: every clear job right but
    # slow-nic-0 (a slow host NIC at dp 1 x pp 8 whose S is 0.98 against the generator's 1.30: the
    # method's S does not see it), no machine or GC on the healthy and stalled ones
    outcomes = heldout3.run(heldout3.subset(1, 5))
    s = heldout3.summarize(outcomes)
    assert s["jobs"] == 22
    assert [m.split(":")[0] for m in s["misses"]] == ["slow-nic-0"], s["misses"]  # type: ignore[union-attr]
    assert s["healthy_jobs"] == 6 and s["healthy_with_faulty_or_gc"] == 0


# Set 6 (other seeds, shapes and costs; heavy few-step noise, step bursts and weak slow machines
# under both) and its tuning companion, fixed before the round's first rule change; set 6 is run
# once at the end of the round (docs/ACCURACY.md, "Held-out set 6").
SET6_FINGERPRINT = "114bfc09b04d7376b42e1a11e192ab72b4339867eaefb896f705696d7a210bf1"
TUNE6_FINGERPRINT = "608f11c258fa5cc716e4e256af5a6e29c68cdbe9a6a9b32eaaa95f124379598e"


def test_set_6_and_its_tuning_list_are_the_committed_ones() -> None:
    assert len(heldout3.set3_cases(6)) == len(heldout3.set3_cases("tune6")) == 312
    assert _fingerprint(6) == SET6_FINGERPRINT
    assert _fingerprint("tune6") == TUNE6_FINGERPRINT
    healthy = [c for c in heldout3.set3_cases(6) if c.family.startswith(("healthy", "job-stall"))]
    assert len(healthy) == 96


def test_step_bursts_lengthen_only_the_hit_pairs_and_leave_other_jobs_as_they_were() -> None:
    from diagnosers.synth import CostModel, ScenarioSpec

    spec = ScenarioSpec(dp=4, pp=2, steps=6, microbatches=4, seed=7)
    plain = generate(spec, CostModel())
    # unset, the fields are left out of a dump, so every earlier set's fingerprint holds
    assert "step_burst" not in CostModel().model_dump_json()
    bursty = generate(spec, CostModel(step_burst_prob=0.3, step_burst=(0.5, 0.6)))
    a, b = plain.trace.ops, bursty.trace.ops
    assert np.array_equal(a.optype, b.optype) and np.array_equal(a.step, b.step)
    fwd = a.optype == OPTYPES.index("forward-compute")
    ratio = b.duration[fwd] / a.duration[fwd]
    # every forward either untouched or 1.5-1.6x, and whole (step, worker) pairs hit together
    hit = ratio > 1.01
    assert np.all((~hit) | ((ratio > 1.49) & (ratio < 1.61))) and 0.1 < hit.mean() < 0.5
    for st in np.unique(a.step):
        for d in range(4):
            for s in range(2):
                m = (a.step[fwd] == st) & (a.dp_rank[fwd] == d) & (a.stage[fwd] == s)
                assert hit[m].all() or not hit[m].any()
    assert bursty.step_time > plain.step_time


# --- the set-6 round: rules changed on tune5, tune6 and set 5's second look ----------------------


@pytest.mark.parametrize(
    ("which", "name"),
    [
        # dp 2 x pp 11, 4 steps of +-30% step noise: the fast ops repeated the step sums' 2.2-2.8
        # sigma as 4.9 (fast_ops_are_step_sums: no second look where one factor moves every op)
        ("tune6", "healthy-step-noise-6"),
        # dp 4 x pp 4, 4 steps of +-23%: 6.2 "sigma" out of the deflated step floor, 4.5 of the
        # unbiased one (unbiased_typical_sigma in outlier_z)
        ("tune5", "healthy-step-noise-8"),
        # two workers (dp 2 x pp 1), 3 steps of +-40-50%: the floor read from the pair's successive
        # steps, where it was left at 0.5% with nobody outside the candidate
        ("tune6", "healthy-step-noise-few-1"),
        ("tune6", "job-stall-small-9"),
        # dp 1 x pp 2, 5 steps of +-43%: a stage 1.13x the other, compared with nobody (z = inf),
        # on a measured step floor of 24%
        ("tune6", "job-stall-small-5"),
        # dp 8 x pp 1, 5 steps of +-46%: the outlier-worker fallback's bar (sqrt(2 ln n) + 0.5)
        # was 2.5 against a healthy worker's 2.6; the joint test's bar holds where no second look
        # exists
        ("tune6", "healthy-step-noise-few-0"),
        # dp 12 x pp 2, step bursts: a worker hit in 3 of 4 steps, its fourth at its peers' level
        ("tune6", "healthy-step-bursts-2"),
        # set 5's three false machines of its one run (seen data since)
        (5, "healthy-step-noise-5"),
        (5, "healthy-step-noise-mild-gpu-2"),
        (5, "job-stall-small-4"),
    ],
)
def test_set6_round_no_machine_on_a_healthy_job_of_few_noisy_steps(which: int | str, name: str) -> None:
    o = _outcome_of(which, name)
    assert o.healthy and not o.false_machine_or_gc, o.got


@pytest.mark.parametrize(
    "name",
    [
        # dp 2 x pp 1, 4 steps of +-16%: a 1.53x machine compared with its one peer on a floor read
        # through successive steps (no few-steps bias to correct: NoiseFloor.step_unbiased)
        "faulty-weak-step-noise-6",
        # dp 2: a burst on the one peer brings the slow machine's ratio to 1 in that step; its own
        # compute is not normal there, so the step is no "normal step" (_normal_step)
        "faulty-weak-bursts-10",
        "faulty-weak-bursts-11",
    ],
)
def test_set6_round_a_weak_machine_under_step_noise_or_bursts_is_still_found(name: str) -> None:
    o = _outcome_of("tune6", name)
    assert o.top1_ok and o.got[0][0] == "faulty-machine", o.got


def test_a_slice_of_set_6_at_its_figures() -> None:
    # set 6 was run once at the end of its round (docs/ACCURACY.md, "Held-out set 6": top-1 0.971,
    # multi-cause recall 0.900, 0 of 96 healthy jobs with a machine or GC); the first job of every
    # family and mix group gives, with the rules as they are now, every clear job right, both
    # mixes' five clear causes found, and no machine or GC on the eight healthy and stalled ones
    outcomes = heldout3.run(heldout3.subset(1, 6))
    s = heldout3.summarize(outcomes)
    assert s["jobs"] == 26
    assert s["misses"] == [], s["misses"]
    assert s["top1_clear_right"] == s["clear_jobs"] == 23
    assert s["multi_cause_found"] == "5 of 5"
    assert s["healthy_jobs"] == 8 and s["healthy_with_faulty_or_gc"] == 0
