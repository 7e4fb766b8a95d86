"""The ninth held-out part of the example job's recordings (``tests/data/kineto_widened/heldout9``,
a balanced sample of the classes; its run-once figure in docs/ACCURACY.md, "Eighth round"): which
recordings the diagnosis gets right (top cause and its ranks, scored by ``bench/recordings.py``
against ``injections.json``).

Pins the figure written in the docs, both ways: a rule change that loses a recording fails here,
and one that gains a missed one fails too, so the figure in the docs is updated with it (and then
stated as a second look, since this part is seen data after its one run)."""

from __future__ import annotations

from tests._support.recorded import widened_part_score

# The figure of the one run: 11 of 13 (docs/ACCURACY.md, "Eighth round"; the misses were
# healthy-2x3, a false slow link on ranks 3 and 5, and slow-rank-last-3x2, only the last stage's
# load). Pinned here now is the second look after the twelfth round's ranking (seen data, not a
# fresh figure): 13 of 13 strict. slow-rank-last-3x2 (10 ms on rank 4, dp 1, last stage, DP 3)
# was the last stage's standing load first (marginal gain 1.171, its typical DP rank read with the
# slow rank among the three) and rank 4 second (1.169); with the stage's weight read without the
# slow machine's steps the stage gains 1.123, and rank 4's machine is first.
MISSED: dict[str, tuple[str, list[int]]] = {}


def test_the_ninth_held_out_part_keeps_its_second_look() -> None:
    scored, got, missed = widened_part_score("heldout9", 13)
    assert missed == MISSED
    assert sum(s.right for s in scored.values()) == 13
    assert sum(s.right_standing for s in scored.values()) == 13
    assert got["slow-rank-last-3x2"] == ("faulty-machine", [4])
    assert scored["slow-rank-last-3x2"].got[1][:1] == ("stage-imbalance",)
    # the healthy recordings name no faulty machine and no GC; each only the example's standing
    # last-stage load
    healthy = [s for s in scored.values() if s.healthy]
    assert len(healthy) == 3 and not any(s.false_machine_or_gc for s in healthy)
    for name in ("healthy-2x3", "healthy-3x3", "healthy-4x2"):
        assert [g[0] for g in scored[name].got] == ["stage-imbalance"], name
    # no silent miss
    assert not any(s.silent_miss for s in scored.values())
    # both onsets found as onsets; the DP-2 slow ranks on a first and a third stage found
    assert got["onset-2x3"] == ("faulty-machine", [2]) and got["onset-4x2"] == ("faulty-machine", [6])
    for name in ("layers-2x3", "slow-rank-2x2", "slow-rank-2x4", "onset-2x3", "onset-4x2",
                 "send-delay-2x3", "var-seq-4x2", "gc-pause-2x4", "dataloader-stall-3x2", "healthy-3x3",
                 "healthy-4x2", "slow-rank-last-3x2"):
        assert scored[name].right, name
