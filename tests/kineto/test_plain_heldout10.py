"""The run-once figure of the tenth held-out part of the plain PyTorch recordings
(``tests/data/kineto_plain_heldout10``, a balanced sample recorded and committed before the
far-forward round's rule changes; docs/ACCURACY.md, "Tenth held-out part"): which recordings the
kernel-level diagnosis gets right (top cause and its ranks against ``injections.json``).

Pins the figure written in the docs, both ways: a rule change that loses a recording fails here,
and one that gains a missed one fails too, so the figure in the docs is updated with it (and then
stated as a second look, since this part is seen data after its one run)."""

from __future__ import annotations

import numpy as np

from diagnosers.detectors import compute_stats
from diagnosers.detectors.stats import BWD, FWD
from diagnosers.readers import load_trace
from diagnosers.transport_noise import NOISE_SHARE, detection_view, joint_collectives, transport_noise
from diagnosers.whatif import analyze, build_engine
from tests._support.recorded import DATA, plain_part_score, view_stats

PART = DATA / "kineto_plain_heldout10"

# The figure of the one run was 11 of 13: a healthy 2-rank DDP job whose gradient all-reduces ran
# long after both members arrived in most steps (recorded at load 13.4) named slow communication,
# and a 100 ms input stall on the last rank of a 4-rank FSDP2 job whose steps ran 0.33-0.87 s, too
# small a share of the lost time for the stall finding. Second look (seen data, the put-back round,
# docs/ACCURACY.md): the healthy job's transient transfers are judged in the ideal run too, where
# they hold 138% of the slowdown, so the detection view is made and no cause is named; and one input
# pipeline late in one step is weighed against the time lost in that step when the gap stands out
# of the other steps' times (the stall: 38% of its step's lost time, 5.2 robust sigma): 13 of 13.
MISSED: dict[str, tuple[str, list[int]]] = {}


def test_the_tenth_held_out_part_keeps_its_second_look_figure() -> None:
    right, missed = plain_part_score("kineto_plain_heldout10", 13)
    assert missed == MISSED
    assert len(right) == 13
    # every healthy job names no cause, every slow rank (the 8 ms one and both FSDP2 ones among
    # them), both GC jobs (one a lone collection), both stalls
    assert {"ddp-healthy-2rank", "ddp-healthy-4rank", "fsdp-healthy-2rank", "fsdp-healthy-3rank",
            "ddp-gc-3rank", "fsdp-gc-2rank", "ddp-stall-2rank", "fsdp-stall-4rank"} <= right
    assert {n for n in right if "-slow-" in n} == {"ddp-slow-2rank", "ddp-slow-3rank", "ddp-slow-4rank",
                                                  "fsdp-slow-2rank", "fsdp-slow-3rank"}


def test_the_healthy_job_once_named_slow_communication_has_long_transfers_in_most_steps() -> None:
    folder = PART / "ddp-healthy-2rank"
    trace = load_trace([folder / "traces"])
    eng = build_engine(trace)
    # taken out of the measured run its transient transfers save almost nothing (the backward they
    # overlap holds the step), put into the ideal run they cost more than the whole slowdown: the
    # detection view is made for the second reading
    found = transport_noise(eng, joint_collectives(trace, eng))
    assert found is not None
    assert found[0].share < NOISE_SHARE <= 1.0 < found[0].share_added
    assert not found[0].persistent
    assert detection_view(trace, eng, analyze(trace, engine=eng)) is not None
    stats = compute_stats(trace, eng)
    comm = ~np.isin(stats.optype, [FWD, BWD])
    per = np.zeros((stats.n_steps, stats.dp))
    np.add.at(per, (stats.op_step_index[comm], stats.op_dp[comm]), stats.transfer[comm])
    # the earliest member's transfer time per step (a joint collective completes for both at once)
    # is over 10 ms in five of the six steps here (at least four asked), against 8-9 ms in every
    # step of the ninth part's healthy 2-rank DDP job (after its noise view)
    assert int((per.min(axis=1) > 0.010).sum()) >= 4


def test_the_once_missed_stall_is_a_small_part_of_long_steps() -> None:
    stats = view_stats(PART / "fsdp-stall-4rank")
    i = int(np.flatnonzero(stats.steps == 6)[0])
    idle = stats.launch_idle[:, :, 0]
    assert idle[i, 3] > 0.1 and idle.sum() == idle[i, 3]  # 104 ms on rank 3 at step 6, no other
    assert stats.step_time.min() > 3 * idle[i, 3]  # every step 0.33-0.87 s


def test_the_stall_is_read_on_its_own_step_and_a_healthy_jobs_gap_is_not() -> None:
    """The per-step lost-time reading (``dataloader.lost_in_stalling_steps``) on the two jobs of this
    part it is closest to: the 104 ms stall counts (a third of its step's lost time, the gap 5.2
    robust sigma out of the other steps' times); the healthy 4-rank DDP job's 25 ms gap before one
    rank's first op holds 81% of its step's lost time but is only 1.2 sigma out, so it reads 0."""
    from diagnosers.detectors.dataloader import lost_in_stalling_steps

    for name, low, high in (("fsdp-stall-4rank", 0.25, 0.5), ("ddp-healthy-4rank", 0.0, 0.0)):
        trace = load_trace([PART / name / "traces"])
        eng = build_engine(trace)
        view = detection_view(trace, eng, analyze(trace, engine=eng))
        assert view is not None
        per_step = view.stats.launch_idle.max(axis=(1, 2))
        assert int((view.stats.launch_idle.mean(axis=0) > 0).sum()) == 1  # one worker's gap
        assert low <= lost_in_stalling_steps(view.report, view.stats, per_step) <= high
