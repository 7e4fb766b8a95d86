"""The one-position form of the fast-step finding (``detectors/fast_step.py``,
``fast_position_candidate``): a kernel-level worker whose fastest step at one forward segment
position stands far above its stage peers' fastest and typical step there. Checked against a
plain-loop oracle, on the seen FSDP2 slow ranks it was made for (an 8-15 ms cost in one of the
seven forward segments of a 3- and 4-rank job, under the whole-pass bars), on the recordings
closest to its bars without a slow rank, and on the synthetic kernel-level healthy jobs."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest

from diagnosers.detectors import compute_stats
from diagnosers.detectors.fast_step import (
    FAST_MIN_SIGMA,
    FAST_POS_MIN,
    FAST_POS_TYPICAL,
    fast_position_candidate,
    fast_position_holds,
    fast_step_candidate,
    fast_step_holds,
    log_spread,
    per_position_forward,
)
from diagnosers.detectors.stats import FWD
from diagnosers.diagnose import diagnose
from diagnosers.readers import load_trace
from diagnosers.synth.kineto_kernels import KernelJobSpec, generate
from diagnosers.whatif import analyze, build_engine
from tests._support.recorded import view_stats

DATA = Path(__file__).resolve().parents[1] / "data"


def _oracle(stats: object) -> tuple[int, int, float, float, float | None, float, float]:
    """(rank, position, factor, over-typical, sigma, spread, widest peer spread) by plain loops over
    the op rows (stage 0: kernel-level jobs are single-stage)."""
    st = stats
    sums: dict[tuple[int, int, int], float] = {}
    for i in range(st.n_ops):  # type: ignore[attr-defined]
        if int(st.optype[i]) != FWD:  # type: ignore[attr-defined]
            continue
        key = (int(st.op_step_index[i]), int(st.op_dp[i]), int(st.op_mb[i]))  # type: ignore[attr-defined]
        sums[key] = sums.get(key, 0.0) + float(st.transfer[i])  # type: ignore[attr-defined]
    n_s, dp = st.n_steps, st.dp  # type: ignore[attr-defined]
    n_pos = 1 + max(k[2] for k in sums)

    def series(d: int, j: int) -> list[float]:
        return [sums.get((s, d, j), 0.0) for s in range(n_s)]

    best: tuple[float, int, int] | None = None
    for d in range(dp):
        for j in range(n_pos):
            if any(min(series(e, j)) <= 0 for e in range(dp)):
                continue
            peers = [np.log(min(series(e, j))) for e in range(dp) if e != d]
            lr = np.log(min(series(d, j))) - float(np.median(peers))
            if best is None or lr > best[0]:
                best = (lr, d, j)
    assert best is not None
    lr, d, j = best
    peers = [np.log(min(series(e, j))) for e in range(dp) if e != d]
    med = float(np.median(peers))
    sigma = max(1.4826 * float(np.median([abs(x - med) for x in peers])), FAST_MIN_SIGMA) \
        if len(peers) >= 2 else None
    peer_steps = [v for e in range(dp) if e != d for v in series(e, j) if v > 0]
    over = min(series(d, j)) / float(np.median(peer_steps))
    spread = log_spread(np.array(series(d, j)))
    peer_spread = max(max(log_spread(np.array(series(e, j))) for e in range(dp) if e != d), FAST_MIN_SIGMA)
    return d, j, float(np.exp(lr)), over, sigma, spread, peer_spread


@pytest.mark.parametrize(("part", "name"), [
    ("kineto_plain_heldout7", "fsdp-slow-3rank"),
    ("kineto_plain_tune2", "fsdp-healthy-4rank"),
    ("kineto_plain_heldout", "fsdp-gc-2rank"),
])
def test_the_position_candidate_matches_a_plain_loop(part: str, name: str) -> None:
    stats = view_stats(DATA / part / name)
    c = fast_position_candidate(stats)
    assert c is not None
    d, j, factor, over, sigma, spread, peer_spread = _oracle(stats)
    assert (c.cell, c.position) == ((d, 0), j)
    assert c.factor == pytest.approx(factor) and c.over_typical == pytest.approx(over)
    assert (c.sigma is None) == (sigma is None)
    if sigma is not None:
        assert c.sigma == pytest.approx(sigma)
    assert c.spread == pytest.approx(spread) and c.peer_spread == pytest.approx(peer_spread)


@pytest.mark.parametrize(("part", "name", "rank"), [
    ("kineto_plain_heldout5", "fsdp-slow-3rank", 0),  # 15 ms: fastest forward 0.97x the peers' typical
    ("kineto_plain_heldout7", "fsdp-slow-3rank", 1),  # 12 ms: 1.51x in its fastest whole forward
    ("kineto_plain_heldout8", "fsdp-slow-4rank", 3),  # 8 ms: 1.38x
])
def test_weak_fsdp2_slow_ranks_are_found_at_their_slow_position(part: str, name: str, rank: int) -> None:
    folder = DATA / part / name
    stats = view_stats(folder)
    whole = fast_step_candidate(stats)
    assert whole is not None and fast_step_holds(whole) is None  # the whole-pass bars miss it
    c = fast_position_candidate(stats)
    assert c is not None and c.cell == (rank, 0) and fast_position_holds(c)
    assert c.factor >= FAST_POS_MIN and c.over_typical >= FAST_POS_TYPICAL
    trace = load_trace([folder / "traces"])
    top = diagnose(trace, analyze(trace)).causes[0]
    assert top.id.value == "faulty-machine" and list(top.location.ranks) == [rank]
    assert top.evidence["signature"] == "fast-step" and top.evidence["fast_step_form"] == "one-position"
    assert top.evidence["fast_position"] == c.position
    assert top.confidence < 0.5


@pytest.mark.parametrize(("part", "name", "why"), [
    # a GC job's healthy rank, 4.45x at one position in its fastest step, but sporadically
    # descheduled: its spread there is 6.9x its peer's
    ("kineto_plain_heldout", "fsdp-gc-2rank", "spread"),
    # a healthy 4-rank job's rank 1: 2.30x its peers' fastest at one position, spread 3.7x
    ("kineto_plain_tune2", "fsdp-healthy-4rank", "factor"),
    # the starved healthy DDP rank (one position: the whole forward), 2.87x
    ("kineto_plain_heldout7", "ddp-healthy-3rank", "factor"),
    # a healthy rank with no quiet step: 3.38x its peers' fastest, 0.84x their typical step
    ("kineto_plain_heldout8", "ddp-healthy-3rank", "typical"),
])
def test_ranks_without_a_slow_position_closest_to_the_bars_do_not_pass(part: str, name: str,
                                                                       why: str) -> None:
    c = fast_position_candidate(view_stats(DATA / part / name))
    assert c is not None and not fast_position_holds(c)
    if why == "factor":
        assert c.factor < FAST_POS_MIN
    elif why == "typical":
        assert c.factor >= FAST_POS_MIN and c.over_typical < FAST_POS_TYPICAL
    else:
        assert c.factor >= FAST_POS_MIN and c.spread > 1.5 * c.peer_spread


@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
def test_synthetic_healthy_jobs_have_no_slow_position(mode: str) -> None:
    for seed in (0, 1, 2):
        spec = KernelJobSpec(mode=mode, era="new", scenario="none", victim=1, seed=seed, layers=4 + seed)
        with tempfile.TemporaryDirectory() as d:
            generate(spec, Path(d))
            trace = load_trace([d])
            stats = compute_stats(trace, build_engine(trace))
        fwd = per_position_forward(stats)
        assert fwd is not None and fwd.shape[-1] >= 1
        c = fast_position_candidate(stats)
        assert c is not None and not fast_position_holds(c)
