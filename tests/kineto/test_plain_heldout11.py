"""The run-once figure of the eleventh held-out part of the plain PyTorch recordings
(``tests/data/kineto_plain_heldout11``, a balanced sample recorded before any diagnosis of it at
the start of the put-back round; docs/ACCURACY.md, "Eleventh held-out part"): which recordings the
kernel-level diagnosis gets right (top cause and its ranks against ``injections.json``).

Pins the figure written in the docs, both ways: a rule change that loses a recording fails here,
and one that gains the missed one fails too, so the figure in the docs is updated with it (and then
stated as a second look, since this part is seen data after its one run)."""

from __future__ import annotations

import numpy as np

from diagnosers.detectors.stats import BWD, FWD
from tests._support.recorded import DATA, plain_part_score, view_stats

PART = DATA / "kineto_plain_heldout11"

# The figure of the one run was 12 of 13. The miss: a healthy 4-rank DDP job (recorded at load 9.6,
# four processes on two cores) in which one rank's backward ran long in every step, named an
# outlier worker (a faulty machine at low confidence). Second look (seen data, after the run,
# docs/ACCURACY.md): on a forward of one segment a suspect whose fastest forward is under its
# peers' fastest is a starved process, not a slow machine, for the outlier-worker finding too:
# 13 of 13.
MISSED: dict[str, tuple[str, list[int]]] = {}


def test_the_eleventh_held_out_part_keeps_its_second_look_figure() -> None:
    right, missed = plain_part_score("kineto_plain_heldout11", 13)
    assert missed == MISSED
    assert len(right) == 13
    # every healthy job names no cause, every slow rank (the 8 ms one and both FSDP2 ones among
    # them), both GC jobs (one a lone collection), both stalls
    assert {"ddp-healthy-2rank", "ddp-healthy-4rank", "fsdp-healthy-2rank", "fsdp-healthy-3rank",
            "ddp-gc-2rank", "fsdp-gc-3rank", "ddp-stall-4rank", "fsdp-stall-2rank"} <= right
    assert {n for n in right if "-slow-" in n} == {"ddp-slow-2rank", "ddp-slow-3rank", "ddp-slow-4rank",
                                                  "fsdp-slow-2rank", "fsdp-slow-3rank"}


def test_the_healthy_job_once_named_an_outlier_is_slow_in_its_backward_not_its_forward() -> None:
    """The miss's evidence: rank 2's backward is the longest of the job in every step (median
    56 ms against 8-12 ms), while its fastest forward is no slower than its peers' (1.7 ms against
    1.9-2.6 ms): no slow pass of its own in its best step, which an injected slow forward has."""
    stats = view_stats(PART / "ddp-healthy-4rank")
    per = {}
    for code in (FWD, BWD):
        m = stats.optype == code
        x = np.zeros((stats.n_steps, stats.dp))
        np.add.at(x, (stats.op_step_index[m], stats.op_dp[m]), stats.transfer[m])
        per[code] = x
    bwd, fwd = per[BWD], per[FWD]
    assert (bwd.argmax(axis=1) == 2).sum() >= 5  # rank 2's backward the longest in most steps
    assert np.median(bwd[:, 2]) > 3 * np.median(np.delete(bwd, 2, axis=1))
    assert fwd[:, 2].min() <= np.delete(fwd, 2, axis=1).min(axis=0).min()  # its best forward: no slower


def test_a_level_forward_is_no_slow_machine_and_every_ddp_slow_rank_forward_is_slow() -> None:
    """``fast_step.starved_not_slow`` on a forward of one segment: the healthy job's outlier (rank
    2, fastest forward 0.77x its peers') reads as starved; each DDP slow rank of the part (8-20 ms
    in every forward) does not, its fastest forward several times its peers'."""
    from diagnosers.detectors.fast_step import FAST_LEVEL_FORWARD, fast_step_candidate, starved_not_slow

    stats = view_stats(PART / "ddp-healthy-4rank")
    c = fast_step_candidate(stats, (2, 0))
    assert c is not None and c.forward < FAST_LEVEL_FORWARD
    assert starved_not_slow(stats, [(2, 0)])
    for name, rank in (("ddp-slow-2rank", 0), ("ddp-slow-3rank", 1), ("ddp-slow-4rank", 3)):
        stats = view_stats(PART / name)
        c = fast_step_candidate(stats, (rank, 0))
        assert c is not None and c.forward > 4 * FAST_LEVEL_FORWARD
        assert not starved_not_slow(stats, [(rank, 0)])
