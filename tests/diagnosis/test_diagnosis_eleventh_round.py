"""Eleventh round on real recordings (docs/ACCURACY.md, "Eleventh round"): a DP-2 pipeline row
carried by one worker (its fastest ops far above its row peer's, the peer's at the other stages'
speed) is that worker, not a stage imbalance (``stage_imbalance._carried_by_one_worker``), and a
host holding more than half the job's workers is no slow-communication host candidate. Each rule
is pinned on the seen recording that needed it, and the first one's bars on recordings it must
leave alone."""

from __future__ import annotations

from pathlib import Path

from diagnosers.detectors import stage_imbalance
from diagnosers.detectors.slow_communication import candidates
from diagnosers.diagnose import diagnose
from diagnosers.vocab import CauseId
from tests._support.recorded import widened_folder, widened_stats, widened_trace


def _causes(folder: Path) -> list[tuple[CauseId, list[int]]]:
    return [(c.id, c.location.ranks) for c in diagnose(widened_trace(folder)).causes]


def test_a_dp2_row_carried_by_one_worker_is_that_worker() -> None:
    # heldout11 slow-rank-2x2: 15 ms on rank 0 (first stage); its fastest forward and backward run
    # 3.7x and 4.0x its peer's, the peer's 0.92x and 1.04x the other stage's: not the stage
    folder = widened_folder("heldout11", "slow-rank-2x2")
    stats = widened_stats(folder)
    assert stage_imbalance._carried_by_one_worker(stats, 0)
    assert not stage_imbalance._carried_by_one_worker(stats, 1)
    assert _causes(folder)[0] == (CauseId.FAULTY_MACHINE, [0])


def test_a_heavy_row_keeps_its_reading() -> None:
    # a slow rank on the last stage, whose peer is heavy at its best too (the head and the loss):
    # the stage stays a stage (heldout4 slow-rank-last-2x3, rank 5 at 3.2x and 3.7x its peer)
    stats = widened_stats(widened_folder("heldout4", "slow-rank-last-2x3"))
    assert not stage_imbalance._carried_by_one_worker(stats, 2)
    # a partition-heavy stage is never judged (heldout5 layers-2x4: its stage-1 rank 2 runs 1.9x
    # and 3.0x its peer at its best, but the partition gives the stage two layers)
    stats = widened_stats(widened_folder("heldout5", "layers-2x4"))
    assert not stage_imbalance._carried_by_one_worker(stats, 1)
    # DP 3 rows set their slow machine aside themselves (heldout2 slow-rank-3x2, rank 4)
    stats = widened_stats(widened_folder("heldout2", "slow-rank-3x2"))
    assert stats.dp == 3 and not stage_imbalance._carried_by_one_worker(stats, 1)


def test_a_host_holding_most_of_the_job_is_no_host_candidate() -> None:
    # heldout11 healthy-3x3: host 0 holds 8 of the 9 ranks; its false slow communication is gone
    folder = widened_folder("heldout11", "healthy-3x3")
    stats = widened_stats(folder)
    assert stats.probe is not None
    names = [name for name, _, _ in candidates(stats, stats.probe.original)]
    assert not any(n.startswith("all communication of host") for n in names)
    assert [c for c, _ in _causes(folder)] == [CauseId.STAGE_IMBALANCE]
