"""The third plain tuning part (``tests/data/kineto_plain_tune3``; docs/ACCURACY.md, "The position
round"): four healthy jobs name no cause, the 10 ms FSDP2 slow rank is found at its slow forward
segment, and so, since a forward cut into several segments asks its slow segment only to be above
its peers' typical step there (docs/ACCURACY.md, "The far-forward round"), is the 6 ms one of a
4-rank job (3.67x its peers' fastest at its slow segment, 1.39x their median step there, under the
2x bar it missed by before). Pinned both ways, as the held-out parts' figures."""

from __future__ import annotations

from diagnosers.detectors.fast_step import (
    FAST_OVER_TYPICAL,
    FAST_POS_MIN,
    FAST_POS_TYPICAL,
    fast_position_candidate,
    fast_position_holds,
)
from tests._support.recorded import DATA, plain_part_score, view_stats


def test_the_third_tuning_part_keeps_its_figure() -> None:
    right, missed = plain_part_score("kineto_plain_tune3", 6)
    assert missed == {}
    assert {"ddp-healthy-2rank", "ddp-healthy-2rank-b", "fsdp-healthy-2rank", "fsdp-healthy-3rank",
            "fsdp-slow-3rank", "fsdp-slow-4rank"} == right


def test_the_6ms_fsdp2_slow_rank_is_under_the_2x_bar_and_above_the_typical_step() -> None:
    c = fast_position_candidate(view_stats(DATA / "kineto_plain_tune3" / "fsdp-slow-4rank"))
    assert c is not None and c.cell == (1, 0)
    assert c.factor >= FAST_POS_MIN and FAST_OVER_TYPICAL <= c.over_typical < FAST_POS_TYPICAL
    assert fast_position_holds(c)
