"""The third plain tuning part (``tests/data/kineto_plain_tune3``; docs/ACCURACY.md, "The position
round"): four healthy jobs name no cause, the 10 ms FSDP2 slow rank is found at its slow forward
segment, and the 6 ms one of a 4-rank job is a miss named by its evidence (3.67x its peers'
fastest at its slow segment, but only 1.39x their median step there, under the one-position bar).
Pinned both ways, as the held-out parts' figures."""

from __future__ import annotations

from diagnosers.detectors.fast_step import FAST_POS_MIN, FAST_POS_TYPICAL, fast_position_candidate
from tests._support.recorded import DATA, plain_part_score, view_stats


def test_the_third_tuning_part_keeps_its_figure() -> None:
    right, missed = plain_part_score("kineto_plain_tune3", 6)
    assert missed == {"fsdp-slow-4rank": ("none", [])}
    assert {"ddp-healthy-2rank", "ddp-healthy-2rank-b", "fsdp-healthy-2rank", "fsdp-healthy-3rank",
            "fsdp-slow-3rank"} == right


def test_the_6ms_fsdp2_slow_rank_is_under_the_typical_step_bar() -> None:
    c = fast_position_candidate(view_stats(DATA / "kineto_plain_tune3" / "fsdp-slow-4rank"))
    assert c is not None and c.cell == (1, 0)
    assert c.factor >= FAST_POS_MIN and c.over_typical < FAST_POS_TYPICAL
