"""Two forms of the fast-step finding (``detectors/fast_step.py``) made on seen weak slow ranks:

- a forward far out (``"one-pass-far"``): a rank whose fastest forward is at least ``FAST_FAR``
  times its peers' fastest is slow without the whole-compute bar, since its peers' backward holds
  their wait for it (held-out 9 ``ddp-slow-4rank``, 8 ms on the last of 4 DDP ranks: 7.4x in its
  fastest forward, 0.72x in its fastest whole compute);
- a forward cut into several segments (FSDP2) asks the one-position candidate only to be above its
  peers' typical step there (``FAST_OVER_TYPICAL``), not twice it (tune3 ``fsdp-slow-4rank``, 6 ms
  on a middle rank of 4: 3.67x its peers' fastest at its slow segment, 1.39x their typical step);
  a one-segment forward (DDP) keeps the 2x bar.

Each is checked on the slow rank it was made for and on the recordings without a slow rank that
come closest to its bars."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosers.detectors.fast_step import (
    FAST_COMPUTE_MIN,
    FAST_FAR,
    FAST_OVER_TYPICAL,
    FAST_POS_MIN,
    FAST_POS_TYPICAL,
    fast_position_candidate,
    fast_position_holds,
    fast_step_candidate,
    fast_step_holds,
    position_typical_bar,
)
from diagnosers.diagnose import diagnose
from diagnosers.readers import load_trace
from diagnosers.whatif import analyze
from tests._support.recorded import view_stats

DATA = Path(__file__).resolve().parents[1] / "data"


def _top(folder: Path) -> tuple[str, list[int], dict[str, object], float]:
    trace = load_trace([folder / "traces"])
    dg = diagnose(trace, analyze(trace))
    assert dg.causes, f"{folder.name}: no cause"
    top = dg.causes[0]
    return top.id.value, list(top.location.ranks), dict(top.evidence), top.confidence


def test_a_forward_far_out_is_slow_without_the_whole_compute_bar() -> None:
    folder = DATA / "kineto_plain_heldout9" / "ddp-slow-4rank"
    c = fast_step_candidate(view_stats(folder))
    assert c is not None and c.cell == (3, 0)
    # far out in its forward, narrower than its peers, above their typical step ...
    assert c.forward >= FAST_FAR and c.z is not None and c.z > 10
    assert c.spread < c.peer_spread and c.over_typical >= FAST_OVER_TYPICAL
    # ... but its peers' backward (holding their wait for it) is slower than its own
    assert c.compute < FAST_COMPUTE_MIN and c.backward < 0.5
    assert fast_step_holds(c) == "one-pass-far"
    cause, ranks, evidence, conf = _top(folder)
    assert (cause, ranks) == ("faulty-machine", [3])
    assert evidence["signature"] == "fast-step" and evidence["fast_step_form"] == "one-pass-far"
    assert conf < 0.5


@pytest.mark.parametrize(("part", "name"), [
    ("kineto_plain_heldout8", "ddp-stall-3rank"),    # 3.82x, 0.9 sigma: a stall job's healthy rank
    ("kineto_plain_heldout8", "ddp-healthy-3rank"),  # 3.38x, 13 sigma: no quiet step, 0.84x typical
    ("kineto_plain_heldout7", "ddp-healthy-3rank"),  # 2.87x: starved sporadically
    ("kineto_plain_heldout9", "ddp-healthy-3rank"),  # 2.41x, 17.6 sigma, compute 0.74x
])
def test_ranks_without_a_slow_rank_closest_to_the_far_bar_do_not_pass(part: str, name: str) -> None:
    c = fast_step_candidate(view_stats(DATA / part / name))
    assert c is not None and c.forward < FAST_FAR
    assert fast_step_holds(c) is None


def test_a_cut_forward_asks_its_slow_segment_only_to_be_above_the_typical_step() -> None:
    folder = DATA / "kineto_plain_tune3" / "fsdp-slow-4rank"
    stats = view_stats(folder)
    whole = fast_step_candidate(stats)
    assert whole is not None and fast_step_holds(whole) is None
    c = fast_position_candidate(stats)
    assert c is not None and c.cell == (1, 0) and c.positions == 7
    assert c.factor >= FAST_POS_MIN and FAST_OVER_TYPICAL <= c.over_typical < FAST_POS_TYPICAL
    assert position_typical_bar(c) == FAST_OVER_TYPICAL and fast_position_holds(c)
    cause, ranks, evidence, _ = _top(folder)
    assert (cause, ranks) == ("faulty-machine", [1])
    assert evidence["fast_step_form"] == "one-position" and evidence["fast_position"] == c.position


def test_a_one_segment_forward_keeps_the_2x_typical_bar() -> None:
    # DDP: the position is the whole pass; a healthy rank with no quiet step, 3.38x its peers'
    # fastest and 0.84x their typical step, stays under it
    c = fast_position_candidate(view_stats(DATA / "kineto_plain_heldout8" / "ddp-healthy-3rank"))
    assert c is not None and c.positions == 1
    assert position_typical_bar(c) == FAST_POS_TYPICAL
    assert c.factor >= FAST_POS_MIN and not fast_position_holds(c)


@pytest.mark.parametrize(("part", "name"), [
    ("kineto_plain_heldout7", "fsdp-stall-4rank"),   # 1.74x at its top position, spread in bounds
    ("kineto_plain_tune2", "fsdp-healthy-4rank"),    # 2.30x, spread 3.7x its widest peer's
    ("kineto_plain_heldout", "fsdp-gc-2rank"),       # 4.45x, spread 6.9x (a GC job's healthy rank)
])
def test_fsdp2_ranks_without_a_slow_rank_closest_to_the_position_bars_do_not_pass(part: str,
                                                                                 name: str) -> None:
    c = fast_position_candidate(view_stats(DATA / part / name))
    assert c is not None and c.positions == 7 and not fast_position_holds(c)
    assert c.factor < FAST_POS_MIN or c.spread > 1.5 * c.peer_spread
