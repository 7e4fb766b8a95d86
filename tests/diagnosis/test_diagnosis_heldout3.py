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

import pytest

from diagnosers.diagnose import diagnose
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


def test_the_one_false_machine_left_is_as_documented() -> None:
    # healthy-noisy-8: a GPU 3% slower than its peers, the slowest of 18 noisy healthy ones (dp 3),
    # stands 7.4 "sigma" out of the others' MAD (each of them against a stage median holding
    # itself); measured leave-one-out it is 2.5. Correcting the spread lost four real recordings'
    # weak slow ranks, so it is left open (docs/ACCURACY.md, "Held-out set 3"). When a rule change
    # fixes it, this test fails and the docs' figure moves with it.
    o = _outcome("healthy-noisy-8")
    assert [g[:3] for g in o.got] == [("faulty-machine", 0.566, [36])]


@pytest.mark.parametrize(
    ("name", "top"),
    [
        # a slow worker on a stage the partition makes heavy: the stage's per-layer compute is read
        # without the slow machine (it was 30% over the others' with it, so "not the partition")
        ("faulty-on-heavy-9", "stage-imbalance"),
        ("faulty-on-heavy-7", "stage-imbalance"),
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
