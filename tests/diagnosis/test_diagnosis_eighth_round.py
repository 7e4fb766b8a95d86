"""Eighth round on real recordings (docs/ACCURACY.md, "Eighth round"): an outlier worker read from
its fastest ops when its step sums are lost in the host's noise (``faulty_machine._fast_op_outlier``),
and a job-wide slow communication held mostly in one step is a whole-job stall, no cause
(``slow_communication.transient`` on every transfer). Each rule is pinned on the seen recording
that needed it, and the fast-op finding is checked against every seen healthy recording."""

from __future__ import annotations

import numpy as np
import pytest

from diagnosers.detectors import faulty_machine, slow_communication
from diagnosers.detectors.peers import peer_ratio
from diagnosers.diagnose import diagnose
from diagnosers.vocab import CauseId
from tests._support.recorded import (
    widened_folder,
    widened_healthy,
    widened_hottest,
    widened_stats,
    widened_trace,
)

SEEN = ("tune", "heldout", "heldout2", "heldout3", "heldout4", "heldout5", "heldout6", "heldout7", "heldout8")


def test_a_dp2_slow_rank_inside_the_step_noise_is_named_by_its_fastest_ops() -> None:
    # heldout8 slow-rank-2x3: 15 ms on rank 3 (dp 1, middle stage); step floor 80%, its step
    # compute at or below its peer's in three of four steps; its fastest ops 3.5x its peer's
    folder = widened_folder("heldout8", "slow-rank-2x3")
    st = widened_stats(folder)
    cell = (1, 1)
    per_step = peer_ratio(faulty_machine.fast_op_steps(st), cell)
    assert float(per_step.min()) >= faulty_machine.FAST_OUTLIER_STEP
    every = np.ones(st.n_steps, dtype=bool)
    assert faulty_machine.fast_op_outlier_z(st, [cell], every) >= faulty_machine.OUTLIER_Z
    dg = diagnose(widened_trace(folder))
    assert [(c.id, c.location.ranks) for c in dg.causes] == [(CauseId.FAULTY_MACHINE, [3])]
    top = dg.causes[0]
    assert top.evidence["signature"] == "outlier-worker"
    assert float(top.evidence["fast_op_factor"]) > 3.0  # type: ignore[arg-type]
    assert float(top.evidence["fast_op_min_step_ratio"]) >= 1.5  # type: ignore[arg-type]
    assert top.confidence < 0.3  # not every faulty-machine test holds: the confidence says so
    assert "fastest ops" in top.summary and "No straggler found" not in dg.summary


@pytest.mark.parametrize("part", SEEN)
def test_no_seen_healthy_recording_passes_the_fast_op_outlier(part: str) -> None:
    # the finding's bars against the healthy jobs' own hottest workers (whatever else they get)
    for folder in widened_healthy(part):
        report, st, cell = widened_hottest(folder)
        assert faulty_machine._fast_op_outlier(report, st, cell, 9.9) is None, folder.name


def test_a_job_wide_stall_in_one_step_is_no_slow_communication() -> None:
    # heldout7 healthy-4x2: every transfer idealised removes 46% of the slowdown (compute 26%),
    # no link or group localised, and 62% of the job's excess transfer time sits in one step of four
    folder = widened_folder("heldout7", "healthy-4x2")
    st = widened_stats(folder)
    assert st.probe is not None
    is_comm = slow_communication.comm_mask(st)
    base = slow_communication.type_baseline(st, st.probe.original, is_comm)
    assert slow_communication.transient(st, st.probe.original, base, [("all", [], is_comm)]) == [True]
    assert diagnose(widened_trace(folder)).causes == []
    # a slow send spreads its excess over the steps: its link is still found (heldout7 send-delay-3x2)
    dg = diagnose(widened_trace(widened_folder("heldout7", "send-delay-3x2")))
    assert [(c.id, c.location.ranks) for c in dg.causes] == [(CauseId.SLOW_COMMUNICATION, [1, 4])]
