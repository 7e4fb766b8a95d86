"""Ninth round on real recordings (docs/ACCURACY.md, "Ninth round"): an outlier worker inside a
stage imbalance's row is reported beside it (``faulty_machine.outlier_in_row``), a PP link whose
fastest lone sends are as fast as its peer links' carries nothing (``slow_communication.floor_normal``),
and an outlier worker far outside the others is judged under the decomposition threshold too
(``faulty_machine.outlier_worker``). Each rule is pinned on the seen recordings that needed it, and
the row rule is checked against every seen healthy recording."""

from __future__ import annotations

import numpy as np
import pytest

from diagnosers.detectors import faulty_machine, slow_communication
from diagnosers.detectors.base import CauseMatch
from diagnosers.diagnose import diagnose
from diagnosers.vocab import CauseId, Pattern, Resource, Spatial, Temporal
from tests._support.recorded import (
    widened_causes,
    widened_folder,
    widened_healthy,
    widened_hottest,
    widened_stats,
    widened_trace,
)

SEEN = ("tune", "heldout", "heldout2", "heldout3", "heldout4", "heldout5", "heldout6", "heldout7", "heldout8",
        "heldout9")


def test_a_slow_rank_on_the_loaded_last_stage_is_reported_beside_its_load() -> None:
    # heldout9 slow-rank-last-3x2: 10 ms on rank 4 (dp 1, last stage, DP 3); the last stage's
    # standing load is found, and rank 4's S_w excess (0.24) is 6x its stage peers' (0.03-0.04);
    # since the twelfth round's ranking (the stage's weight read without the machine's steps) the
    # machine is first
    dg = diagnose(widened_trace(widened_folder("heldout9", "slow-rank-last-3x2")))
    got = [(c.id, c.location.ranks) for c in dg.causes]
    assert got == [(CauseId.FAULTY_MACHINE, [4]), (CauseId.STAGE_IMBALANCE, [3, 4, 5])]
    machine = dg.causes[0]
    assert machine.evidence["signature"] == "outlier-worker" and machine.confidence < 0.3
    # heldout6 slow-rank-2x4: 10 ms on rank 7 (dp 1, last stage, DP 2), the same way
    got6 = widened_causes(widened_folder("heldout6", "slow-rank-2x4"))
    assert got6 == [(CauseId.STAGE_IMBALANCE, [6, 7]), (CauseId.FAULTY_MACHINE, [7])]


@pytest.mark.parametrize("part", SEEN)
def test_no_seen_healthy_recording_gets_an_outlier_beside_its_standing_load(part: str) -> None:
    # the row rule's bars against every seen healthy job, with its last stage's load as the match
    for folder in widened_healthy(part):
        report, st, (_, p) = widened_hottest(folder)
        row = CauseMatch(
            id=CauseId.STAGE_IMBALANCE, confidence=0.5, location=st.location([(d, p) for d in range(st.dp)]),
            pattern=Pattern(
                spatial=Spatial.ONE_STAGE, temporal=Temporal.PERSISTENT, resource=Resource.COMPUTE
            ),
            summary="the hottest worker's stage",
        )
        assert faulty_machine.outlier_in_row(report, st, [row]) is None, folder.name


def test_a_link_long_only_in_its_waits_is_no_slow_link() -> None:
    # heldout9 healthy-2x3: the PP link of dp 1 between stages 1 and 2 stands out of its peer link
    # by its mean transfer (idealising it removes 57% of the slowdown), but its fastest lone sends
    # are its peer's, both ways: no slow communication, only the last stage's standing load
    folder = widened_folder("heldout9", "healthy-2x3")
    st = widened_stats(folder)
    assert st.probe is not None
    link = slow_communication.p2p_links(st)[1]
    batch = slow_communication.p2p_batch_ids(st)
    mask = np.zeros(st.n_ops, dtype=bool)
    assert slow_communication.floor_normal(
        st, st.probe.original, link, batch, [("pp link dp 1: stage 1 <-> 2", [(1, 1), (1, 2)], mask)]
    ) == [True]
    assert widened_causes(folder) == [(CauseId.STAGE_IMBALANCE, [4, 5])]
    # a slow send's link keeps its finding, its floor 1.7x its peer's (heldout9 send-delay-2x3)
    got9 = widened_causes(widened_folder("heldout9", "send-delay-2x3"))
    assert got9[0] == (CauseId.SLOW_COMMUNICATION, [0, 2])


def test_an_outlier_worker_under_the_decomposition_threshold_is_not_silent() -> None:
    # heldout10 onset-2x4: 20 ms on rank 3 (dp 1, stage 1) from step 4; S = 1.022, under the
    # threshold (1.03) where no detector judges anything, but S_w names rank 3 at 1.105, 14 robust
    # sigma above the others: reported as an outlier worker from step 4 on, at low confidence
    dg = diagnose(widened_trace(widened_folder("heldout10", "onset-2x4")))
    assert dg.slowdown < 1.03
    assert [(c.id, c.location.ranks) for c in dg.causes] == [(CauseId.FAULTY_MACHINE, [3])]
    top = dg.causes[0]
    assert top.evidence["signature"] == "outlier-worker" and top.evidence["onset_step"] == 4
    assert top.confidence < 0.3 and "No straggler found" not in dg.summary
