"""Tenth round on real recordings (docs/ACCURACY.md, "Tenth round"): a worker whose fastest op of
the window beat its stage peers' fastest is no faulty machine (``faulty_machine.faster_at_best``),
and a worker whose fastest forward and backward stand alone above its peers' is reported as an
outlier worker when nothing else matched (``faulty_machine.floor_outlier``). Each rule is pinned on
the seen recordings that needed it, and the outlier rule's bars are checked against every seen
healthy recording."""

from __future__ import annotations

import numpy as np
import pytest

from diagnosers.detectors import faulty_machine
from diagnosers.diagnose import diagnose
from diagnosers.vocab import CauseId
from tests._support.recorded import (
    widened_causes,
    widened_folder,
    widened_healthy,
    widened_hottest,
    widened_stats,
    widened_trace,
)

SEEN = ("tune", "heldout", "heldout2", "heldout3", "heldout4", "heldout5", "heldout6", "heldout7", "heldout8",
        "heldout9", "heldout10")


def test_a_worker_faster_at_its_best_than_its_peers_is_no_machine() -> None:
    # heldout10 healthy-2x3: rank 5 (dp 1, last stage) ran 1.67x its peer's compute in three steps
    # of four, but its fastest backward of the window took 0.61x its peer's fastest: no machine
    folder = widened_folder("heldout10", "healthy-2x3")
    st = widened_stats(folder)
    every = np.ones(st.n_steps, dtype=bool)
    assert int(st.rank_of[1, 2]) == 5
    assert faulty_machine.faster_at_best(st, [(1, 2)], every)
    assert float(faulty_machine.fastest_op_ratios(st, every, [(1, 2)])[1, 1, 2]) < np.log(0.7)
    assert widened_causes(folder) == []
    # heldout10 gc-pause-4x2: the collector's victim keeps its GC pause, without a machine beside it
    assert widened_causes(widened_folder("heldout10", "gc-pause-4x2")) == [(CauseId.GC_PAUSE, [3])]
    # a real slow rank is slower than its peers at its best too (heldout10 slow-rank-2x2, 12 ms)
    st2 = widened_stats(widened_folder("heldout10", "slow-rank-2x2"))
    assert not faulty_machine.faster_at_best(st2, [(1, 0)], np.ones(st2.n_steps, dtype=bool))


@pytest.mark.parametrize(
    ("part", "name", "rank"),
    [
        ("heldout10", "slow-rank-2x3", 2),  # 10 ms, DP 2, middle stage; S_w's hottest is rank 1
        ("heldout10", "slow-rank-last-3x2", 5),  # 10 ms, DP 3, last stage; S_w's hottest is rank 0
        ("heldout6", "slow-rank-weak-2x4", 3),  # 4 ms, DP 2, stage 1
        ("heldout5", "slow-rank-weak-4x2", 5),  # 3 ms, DP 4, last stage
    ],
)
def test_an_outlier_worker_read_from_its_fastest_op_of_the_window(part: str, name: str, rank: int) -> None:
    dg = diagnose(widened_trace(widened_folder(part, name)))
    assert [(c.id, c.location.ranks) for c in dg.causes] == [(CauseId.FAULTY_MACHINE, [rank])]
    top = dg.causes[0]
    assert top.evidence["signature"] == "outlier-worker" and top.confidence < 0.3
    fwd, bwd = top.evidence["fastest_op_factors"]
    assert min(fwd, bwd) >= faulty_machine.FAST_OUTLIER_STEP
    assert "No straggler found" not in dg.summary


@pytest.mark.parametrize("part", SEEN)
def test_no_seen_healthy_recording_gets_a_machine_from_its_fastest_ops(part: str) -> None:
    # the outlier rule's bars against every seen healthy job, called directly (in a diagnosis it
    # runs only when nothing else matched). The closest: heldout10 healthy-3x2, whose rank 4 ran
    # every op about 2x its peers' fastest (S_w 13 sigma out), but whose per-step fast ops move with
    # its step compute (noise correlation 0.92, over FAST_OP_MAX_RHO): no reading of their own
    for folder in widened_healthy(part):
        report, st, _ = widened_hottest(folder)
        assert faulty_machine.floor_outlier(report, st) is None, folder.name
