"""Eleventh round on real recordings (docs/ACCURACY.md, "Eleventh round"): a host holding more
than half the job's workers is no slow-communication host candidate (pinned on the seen recording
that needed it), and a healthy DP-2 job whose one worker runs its fastest ops far above its row
peer's names no faulty machine (the reason the round's rule 37, which read such a row as that
worker, was taken out again)."""

from __future__ import annotations

from diagnosers.detectors.slow_communication import candidates
from diagnosers.vocab import CauseId
from tests._support.recorded import widened_causes, widened_folder, widened_stats


def test_a_healthy_worker_fast_at_its_best_slower_than_its_peer_is_no_machine() -> None:
    # heldout12 healthy-2x4: nothing injected; rank 7's fastest forward and backward run 3.47x and
    # 2.01x its row peer's on a busy host, yet it is no faulty machine (nor GC)
    causes = widened_causes(widened_folder("heldout12", "healthy-2x4"))
    assert not any(c in (CauseId.FAULTY_MACHINE, CauseId.GC_PAUSE) for c, _ in causes)


def test_a_host_holding_most_of_the_job_is_no_host_candidate() -> None:
    # heldout11 healthy-3x3: host 0 holds 8 of the 9 ranks; its false slow communication is gone
    folder = widened_folder("heldout11", "healthy-3x3")
    stats = widened_stats(folder)
    assert stats.probe is not None
    names = [name for name, _, _ in candidates(stats, stats.probe.original)]
    assert not any(n.startswith("all communication of host") for n in names)
    assert [c for c, _ in widened_causes(folder)] == [CauseId.STAGE_IMBALANCE]
