"""The ninth held-out part of the example job's recordings (``tests/data/kineto_widened/heldout9``,
a balanced sample of the classes; its run-once figure in docs/ACCURACY.md, "Eighth round"): which
recordings the diagnosis gets right (top cause and its ranks, scored by ``bench/recordings.py``
against ``injections.json``).

Pins the figure written in the docs, both ways: a rule change that loses a recording fails here,
and one that gains a missed one fails too, so the figure in the docs is updated with it (and then
stated as a second look, since this part is seen data after its one run)."""

from __future__ import annotations

from tests._support.recorded import widened_part_score

# The figure of the one run: 11 of 13 (the round's starting tree gets the same 11, with the same
# diagnoses: neither of the round's rules acts on this part). The misses: (top cause, its ranks)
# as diagnosed.
MISSED = {
    # nothing injected: the PP link of DP rank 1 between stages 1 and 2 stands out of its peer
    # link (``stands_out``), idealising every transfer removes 58% of the slowdown against
    # compute's 28%, the link alone 57%: a false slow link (no faulty machine, no GC)
    "healthy-2x3": ("slow-communication", [3, 5]),
    # 10 ms on rank 4 (dp 1, last stage, DP 3): S_w's hottest by far (25 robust sigma), its compute
    # 1.22-1.62x its peers' in every step, but its speed factor 4.4 sigma out of the others' (the
    # bar is 5), with its optimizer (2.8x, step floor 68%) 3.5 and with its fastest ops (z 2.0)
    # 2.8 (the joint bar is 3.9); only the last stage's imbalance (the example's standing load,
    # the slow rank in it) is named
    "slow-rank-last-3x2": ("stage-imbalance", [3, 4, 5]),
}


def test_the_ninth_held_out_part_keeps_its_run_once_figure() -> None:
    scored, got, missed = widened_part_score("heldout9", 13)
    assert missed == MISSED
    assert sum(s.right for s in scored.values()) == 11
    assert sum(s.right_standing for s in scored.values()) == 11
    # the healthy recordings name no faulty machine and no GC; healthy-3x3 and healthy-4x2 only the
    # example's standing last-stage load
    healthy = [s for s in scored.values() if s.healthy]
    assert len(healthy) == 3 and not any(s.false_machine_or_gc for s in healthy)
    for name in ("healthy-3x3", "healthy-4x2"):
        assert [g[0] for g in scored[name].got] == ["stage-imbalance"], name
    # no silent miss
    assert not any(s.silent_miss for s in scored.values())
    # both onsets found as onsets; the DP-2 slow ranks on a first and a third stage found
    assert got["onset-2x3"] == ("faulty-machine", [2]) and got["onset-4x2"] == ("faulty-machine", [6])
    for name in ("layers-2x3", "slow-rank-2x2", "slow-rank-2x4", "onset-2x3", "onset-4x2",
                 "send-delay-2x3", "var-seq-4x2", "gc-pause-2x4", "dataloader-stall-3x2", "healthy-3x3",
                 "healthy-4x2"):
        assert scored[name].right, name
