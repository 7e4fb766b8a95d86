"""Fifth round on real recordings (docs/ACCURACY.md, "Fifth round"): a communication candidate
whose excess transfer time sits mostly in one step is a transient stall, not slow communication;
and a worker's fast-op speed factor (a low quantile of its forward and backward durations against
its stage peers') may stand in for its step compute in the joint outlier test. Each is checked
against a plain oracle, pinned on the recording that needed both (it failed before), and on
recordings whose findings it must keep."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from diagnosers import whatif
from diagnosers.detectors import compute_stats, faulty_machine, slow_communication
from diagnosers.detectors.base import TraceStats
from diagnosers.detectors.stats import BWD, FWD
from diagnosers.readers import load_trace

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import recordings  # noqa: E402

from tests._support.recorded import widened_folder  # noqa: E402


def _stats(part: str, name: str) -> TraceStats:
    trace = load_trace([widened_folder(part, name) / "traces"])
    return compute_stats(trace, whatif.build_engine(trace))


def _candidates(stats: TraceStats) -> tuple[list[tuple[str, list[tuple[int, int]], np.ndarray]], np.ndarray]:
    assert stats.probe is not None
    transfer = stats.probe.original
    base = slow_communication.type_baseline(stats, transfer, slow_communication.comm_mask(stats))
    return slow_communication.candidates(stats, transfer, base=base), base


def test_transient_matches_a_plain_loop_over_steps() -> None:
    stats = _stats("heldout5", "slow-rank-2x3")
    scored, base = _candidates(stats)
    assert stats.probe is not None
    transfer = stats.probe.original
    got = slow_communication.transient(stats, transfer, base, scored)
    for (_, _, mask), flag in zip(scored, got, strict=True):
        per_step = [0.0] * stats.n_steps
        for i in np.flatnonzero(mask):
            per_step[int(stats.op_step_index[i])] += max(float(transfer[i] - base[i]), 0.0)
        total = sum(per_step)
        assert flag == (total > 0 and max(per_step) > slow_communication.TRANSIENT_SHARE * total)


def test_a_one_step_collective_stall_is_transient_and_a_slow_send_is_not() -> None:
    # heldout5 slow-rank-2x3: stage 0's DP all-reduce holds 0.22 s of excess in one step of four
    # and under 0.01 s in the others; it was the top cause (slow communication) before this round
    stats = _stats("heldout5", "slow-rank-2x3")
    scored, base = _candidates(stats)
    assert stats.probe is not None
    flags = dict(zip([n for n, _, _ in scored],
                     slow_communication.transient(stats, stats.probe.original, base, scored), strict=True))
    assert flags["dp group of stage 0"]
    # an injected slow send lengthens its link in every step
    stats = _stats("tune", "send-delay-2x2")
    scored, base = _candidates(stats)
    assert stats.probe is not None
    flags = dict(zip([n for n, _, _ in scored],
                     slow_communication.transient(stats, stats.probe.original, base, scored), strict=True))
    assert not flags["pp link dp 0: stage 0 <-> 1"]


def test_fast_op_factors_match_a_plain_percentile() -> None:
    stats = _stats("heldout5", "slow-rank-2x3")
    affected = np.ones(stats.n_steps, dtype=bool)
    got = faulty_machine.fast_op_factors(stats, affected, [(0, 1)])
    q = np.zeros((2, stats.dp, stats.pp))
    for k, code in enumerate((FWD, BWD)):
        for d in range(stats.dp):
            for p in range(stats.pp):
                vals = stats.transfer[(stats.optype == code) & (stats.op_dp == d) & (stats.op_pp == p)]
                q[k, d, p] = np.percentile(vals, 100 * faulty_machine.FAST_OP_QUANTILE, method="lower")
    want = np.zeros((stats.dp, stats.pp))
    for k in range(2):
        for d in range(stats.dp):
            for p in range(stats.pp):
                peers = [q[k, x, p] for x in range(stats.dp) if (x, p) != (0, 1)]
                want[d, p] += np.log(q[k, d, p] / np.median(peers)) / 2
    assert np.allclose(got, want)
    # the injected slow rank (rank 2 = dp 0 / stage 1) has the job's highest factor: 4.9x
    assert np.unravel_index(int(np.argmax(got)), got.shape) == (0, 1) and np.exp(got[0, 1]) > 4.0


def test_the_slow_rank_at_dp_2_is_now_found_first() -> None:
    # heldout5 slow-rank-2x3 (15 ms on rank 2 at DP 2): before, stage 0's transient DP stall came
    # first and the machine failed the joint outlier bar (3.64 < 3.89); now the machine alone
    s = recordings.score_folder(widened_folder("heldout5", "slow-rank-2x3"))
    assert s.right and [(g[0], list(g[2])) for g in s.got] == [("faulty-machine", [2])]


def test_slow_sends_keep_their_slow_communication() -> None:
    sends = (("tune", "send-delay-2x2"), ("heldout", "send-delay-4x2"), ("heldout4", "send-delay-2x4"))
    for part, name in sends:
        s = recordings.score_folder(widened_folder(part, name))
        assert s.right, (part, name, s.got)


def test_the_fast_op_factor_alone_at_the_outlier_bar_finds_a_machine() -> None:
    # heldout6 slow-rank-last-3x2 (12 ms on rank 5, looked at after its part's one run): compute
    # outlier z 4.56 < OUTLIER_Z, and no joint test (its optimizer noise follows compute's, rho
    # 0.56); its fast-op z alone is 5.3
    stats = _stats("heldout6", "slow-rank-last-3x2")
    affected = np.ones(stats.n_steps, dtype=bool)
    assert faulty_machine.fast_op_outlier_z(stats, [(2, 1)], affected) >= faulty_machine.OUTLIER_Z
    s = recordings.score_folder(widened_folder("heldout6", "slow-rank-last-3x2"))
    assert s.right and s.got[0][0] == "faulty-machine" and list(s.got[0][2]) == [5]
