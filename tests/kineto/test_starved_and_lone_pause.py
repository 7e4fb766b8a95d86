"""Two rules of the starved-process round on the seen plain recordings: the fast-step finding's
spread test (a healthy rank the host descheduled more than its peers is slow sporadically, a slow
rank in every step) and the GC detector's lone pause (a profile over one collection, judged by that
pause's height above the job's other forwards). Each is checked against a plain-loop oracle and on
the recordings that both sides of its bar come from."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from diagnosers.detectors.fast_step import (
    FAST_MIN_SIGMA,
    FAST_SPREAD_MAX,
    fast_step_candidate,
    fast_step_holds,
    forward_spreads,
    log_spread,
)
from diagnosers.detectors.gc_pause import ONE_PAUSE_GAP, above_tail, lone_pause, paused_forwards
from tests._support.recorded import top_cause, view_stats

DATA = Path(__file__).resolve().parents[1] / "data"


def test_log_spread_and_forward_spreads_match_a_plain_loop() -> None:
    rng = np.random.default_rng(11)
    fwd = rng.uniform(0.002, 0.03, size=(6, 3, 1))
    fwd[2, 1, 0] = 0.0  # an untraced step of rank 1: no reading
    for d in range(3):
        mine, widest = forward_spreads(fwd, (d, 0))
        spreads = []
        for r in range(3):
            v = [x for x in fwd[:, r, 0] if x > 0]
            logs = sorted(float(np.log(x)) for x in v)
            med = float(np.median(logs))
            spreads.append(1.4826 * float(np.median([abs(x - med) for x in logs])))
        assert abs(mine - spreads[d]) < 1e-12
        assert abs(widest - max(max(s for r, s in enumerate(spreads) if r != d), FAST_MIN_SIGMA)) < 1e-12
    # an added constant narrows the relative spread; a factor keeps it
    base = fwd[:, 0, 0]
    assert log_spread(base + 0.05) < log_spread(base)
    assert abs(log_spread(base * 3.0) - log_spread(base)) < 1e-12
    assert log_spread(np.array([0.01])) == 0.0


def test_a_starved_healthy_rank_is_no_fast_step_slow_rank() -> None:
    # held-out 7 ddp-healthy-3rank: nothing injected, rank 0's forwards 6-23 ms in every step
    # against 2-3.5 ms on its peers (its process got less of the CPU): 2.9x in its fastest step,
    # but its forward spreads twice as wide as its widest peer's
    stats = view_stats(DATA / "kineto_plain_heldout7" / "ddp-healthy-3rank")
    c = fast_step_candidate(stats)
    assert c is not None and c.cell == (0, 0)
    assert c.forward >= 1.6 and c.z is not None and c.z >= 4.0  # the magnitude bars pass
    assert c.spread > FAST_SPREAD_MAX * c.peer_spread
    assert fast_step_holds(c) is None
    assert top_cause(DATA / "kineto_plain_heldout7" / "ddp-healthy-3rank") == ("none", [])


def test_the_fast_step_slow_ranks_keep_their_spread() -> None:
    # the seen slow ranks only the fast-step finding names: a sleep in every forward narrows the
    # forward's relative spread or keeps it (0.2-1.0x the widest peer's)
    for part, name, rank in (("kineto_plain_heldout5", "ddp-slow-4rank", 3),
                             ("kineto_plain_heldout6", "ddp-slow-3rank", 1),
                             ("kineto_plain_heldout6", "ddp-slow-4rank", 0),
                             ("kineto_plain_heldout6", "fsdp-slow-4rank", 2),
                             ("kineto_plain_heldout7", "ddp-slow-4rank", 3)):
        c = fast_step_candidate(view_stats(DATA / part / name))
        assert c is not None and c.cell == (rank, 0), name
        assert c.spread <= c.peer_spread, name
        assert fast_step_holds(c) == "one-pass", name


def test_a_lone_collection_is_a_gc_pause() -> None:
    # held-out 7 fsdp-gc-3rank: one gc.collect() of 1.82 s inside rank 2's forward in step 4, the
    # next largest forward excess 27 ms: one (worker, step) pair, 68x the job's other forwards
    folder = DATA / "kineto_plain_heldout7" / "fsdp-gc-3rank"
    stats = view_stats(folder)
    kept = above_tail(stats, paused_forwards(stats))
    rows = stats.fwd_index[kept]
    assert len({(int(stats.op_dp[r]), int(stats.op_step_index[r])) for r in rows}) == 1
    assert lone_pause(stats, kept)
    others = float(stats.fwd_excess[~kept].max())
    assert float(stats.fwd_excess[kept].min()) >= ONE_PAUSE_GAP * others
    assert top_cause(folder) == ("gc-pause", [2])


def test_a_healthy_jobs_largest_forward_is_no_lone_pause() -> None:
    # held-out 4 ddp-healthy-2rank and held-out 2 fsdp-healthy-2rank: one forward each clears the
    # tail gap alone (4.3 ms, 11.6x; 31 ms, 5.2x the others), far under a collection's height
    for part, name in (("kineto_plain_heldout4", "ddp-healthy-2rank"),
                       ("kineto_plain_heldout2", "fsdp-healthy-2rank")):
        stats = view_stats(DATA / part / name)
        kept = above_tail(stats, paused_forwards(stats))
        assert kept.sum() == 1, name
        assert not lone_pause(stats, kept), name
        assert top_cause(DATA / part / name) == ("none", []), name
    # oracle: no pause, no lone pause
    stats = view_stats(DATA / "kineto_plain_heldout4" / "ddp-healthy-2rank")
    assert not lone_pause(stats, np.zeros(len(stats.fwd_index), dtype=bool))
