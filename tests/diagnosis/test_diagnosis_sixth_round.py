"""Sixth round on real recordings (docs/ACCURACY.md, "Sixth round"): a link direction whose
fastest lone sends stand out of its peer links' is tested on the constant it adds to every
transfer (``slow_communication.floor_candidates``, ``floor_shares``); and a hot worker's fastest
ops may show that it is slow in its own compute (``faulty_machine.own_slow``). The floors are
checked against a plain loop over the transfers, each rule is pinned on the recordings that
needed it (each a miss before), and the floor kept off the healthy recordings of the seen parts."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from diagnosers import whatif
from diagnosers.detectors import compute_stats, faulty_machine, slow_communication
from diagnosers.detectors.base import TraceStats
from diagnosers.readers import load_trace
from diagnosers.vocab import CauseId

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import recordings  # noqa: E402

from tests._support.recorded import WIDENED, widened_folder  # noqa: E402


def _stats(part: str, name: str) -> TraceStats:
    trace = load_trace([widened_folder(part, name) / "traces"])
    return compute_stats(trace, whatif.build_engine(trace))


def test_send_floors_match_a_plain_loop_over_the_lone_sends() -> None:
    stats = _stats("heldout5", "send-delay-4x2")
    assert stats.probe is not None
    transfer = stats.probe.original
    is_p2p, link = slow_communication.p2p_links(stats)
    batch = slow_communication.batch_ids(stats, is_p2p)
    got = slow_communication.send_floors(stats, transfer, link, slow_communication.alone_in_call(batch))
    sizes: dict[int, int] = {}
    for b in batch[batch >= 0].tolist():
        sizes[b] = sizes.get(b, 0) + 1
    for k, (code, sender_offset) in enumerate(((slow_communication.FS, 0), (slow_communication.BS, 1))):
        for d in range(stats.dp):
            for s in range(stats.pp - 1):
                vals = sorted(
                    float(transfer[i])
                    for i in range(stats.n_ops)
                    if stats.optype[i] == code and stats.op_dp[i] == d and stats.op_pp[i] == s + sender_offset
                    and (batch[i] < 0 or sizes[int(batch[i])] == 1)
                )
                if not vals:
                    assert np.isnan(got[k, d, s])
                    continue
                want = vals[int(np.floor(slow_communication.SEND_FLOOR_QUANTILE * (len(vals) - 1)))]
                assert got[k, d, s] == pytest.approx(want, rel=0, abs=0)


def test_the_injected_senders_floor_stands_out_and_its_constant_costs_the_job() -> None:
    # heldout5 send-delay-3x2: rank 0's forward sends sleep 15 ms. Its lone sends' floor is about
    # 40x its peer links'; the constant alone costs 42% of the slowdown and 6.7% of the ideal step.
    stats = _stats("heldout5", "send-delay-3x2")
    assert stats.probe is not None
    cands = slow_communication.probe_floor_candidates(stats)
    names = [c.name for c in cands]
    assert "pp link dp 0: stage 0 <-> 1, forward sends" in names
    hit = cands[names.index("pp link dp 0: stage 0 <-> 1, forward sends")]
    assert hit.floor >= 0.012 and hit.floor >= 20 * hit.peer_floor
    share, alone = slow_communication.floor_shares(stats.probe, [hit])[0]
    assert share >= slow_communication.MIN_SHARE and alone >= slow_communication.CLEAR_ALONE


@pytest.mark.parametrize(
    ("part", "name", "ranks"),
    [
        ("heldout5", "send-delay-3x2", [0, 3]),  # no cause before this round
        ("heldout6", "send-delay-4x2", [0, 4]),  # no cause before (the constant: 14% of the gap, 6% alone)
    ],
)
def test_a_slow_send_found_by_its_floor_is_the_top_cause(part: str, name: str, ranks: list[int]) -> None:
    diag = recordings.diagnose_folder(widened_folder(part, name))
    assert diag.causes, f"{part}/{name}: no cause"
    top = diag.causes[0]
    assert top.id == CauseId.SLOW_COMMUNICATION and list(top.location.ranks) == ranks
    assert top.evidence["send_floor_s"] is not None and top.evidence["stands_out"] is True
    assert "forward sends" in str(top.evidence["group"])


def test_no_healthy_recording_of_the_seen_parts_gets_a_floor_finding() -> None:
    healthy = sorted(
        f for part in ("tune", "heldout", "heldout2", "heldout3", "heldout4", "heldout5", "heldout6")
        for f in (WIDENED / part).glob("healthy-*") if (f / "injections.json").is_file()
    )
    assert len(healthy) == 15
    for folder in healthy:
        diag = recordings.diagnose_folder(folder)
        floors = [c for c in diag.causes if c.evidence.get("send_floor_s") is not None]
        assert not floors, f"{folder.parent.name}/{folder.name}: {floors[0].summary}"


def test_a_slow_workers_fastest_ops_show_its_own_compute_under_heavy_step_noise() -> None:
    # tune slow-rank-2x4-s100: 10 ms per forward on rank 5 (dp 1, stage 2) at DP 2, the job's step
    # noise floor 47%. Its step compute is 1.31x its peer's (under the 3-standard-error bar of
    # 0.89 in log units), but its fastest ops run 2.3x its peer's (fast-op z 4.2): it is slow in
    # its own compute, not waiting. Before this round the standing last-stage load was the only
    # cause.
    stats = _stats("tune", "slow-rank-2x4-s100")
    cell = (1, 2)
    floor = faulty_machine.job_floor(stats, [(1, 3), cell, (0, 3)])
    t = faulty_machine.cell_timing(stats, cell, floor)
    assert t.typical < faulty_machine.OWN_Z * floor.typical_sigma()
    assert faulty_machine.joint_typical_z(stats, t, floor) < faulty_machine.OWN_Z
    assert faulty_machine.fast_op_outlier_z(stats, [cell], t.affected) >= faulty_machine.OWN_Z
    assert [k.cell for k in faulty_machine.own_slow(stats, [(1, 3), cell, (0, 3)], floor)] == [cell]
    diag = recordings.diagnose_folder(widened_folder("tune", "slow-rank-2x4-s100"))
    assert diag.causes[0].id == CauseId.FAULTY_MACHINE and list(diag.causes[0].location.ranks) == [5]
