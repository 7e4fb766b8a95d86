"""The twelfth held-out part of the example job's recordings (``tests/data/kineto_widened/heldout12``,
a balanced sample of the classes; its run-once figure in docs/ACCURACY.md, "Eleventh round"): which
recordings the diagnosis gets right (top cause and its ranks, scored by ``bench/recordings.py``
against ``injections.json``).

Pins the figure written in the docs, both ways: a rule change that loses a recording fails here,
and one that gains a missed one fails too, so the figure in the docs is updated with it (and then
stated as a second look, since this part is seen data after its one run)."""

from __future__ import annotations

from tests._support.recorded import widened_part_score

# The figure of the one run, after the eleventh round's rules and the merged synthetic-stream rules:
# 9 of 13 (11 with the example's standing last-stage load first), one false faulty machine on a
# healthy job (healthy-2x4: rank 7, 0.151, found from its fastest ops once rule 37 refused the last
# stage's row as carried by that worker) and one silent miss (the round's starting tree: 11 of 13,
# 13 with the standing load, neither). Rule 37 was then taken out, its premise (a healthy worker
# does not run its fastest ops far above its row peer's) broken by that healthy job: pinned here is
# that second look (docs/ACCURACY.md, "Eleventh round"; not a fresh figure): 10 of 13, 12 with the
# standing load, no false machine or GC, the one silent miss left. The twelfth round's candidate
# clause of the whole-step test (``faulty_machine.steadier_at_best``) then found slow-rank-2x2's
# machine (docs/ACCURACY.md, "A slow machine against a busy host"): 11 of 13, 13 with the standing
# load, no silent miss. The misses: (top cause, its ranks) as diagnosed.
MISSED = {
    # 15 ms in rank 1's sends (first stage, DP 3): the last stage's standing load first, the slow
    # communication on rank 1's link to rank 4 second (right with the standing load)
    "send-delay-3x2": ("stage-imbalance", [3, 4, 5]),
    # 12 ms on rank 5 (dp 1, last stage, DP 2): the last stage's standing load first, rank 5's
    # faulty machine second (right with the standing load)
    "slow-rank-last-2x3": ("stage-imbalance", [4, 5]),
}


def test_the_twelfth_held_out_part_keeps_its_second_look() -> None:
    scored, _got, missed = widened_part_score("heldout12", 13)
    assert missed == MISSED
    assert sum(s.right for s in scored.values()) == 11
    assert sum(s.right_standing for s in scored.values()) == 13
    healthy = [n for n, s in scored.items() if s.healthy]
    assert sorted(healthy) == ["healthy-2x3", "healthy-2x4", "healthy-3x2"]
    assert not any(scored[n].false_machine_or_gc for n in healthy)
    assert scored["healthy-2x3"].got == [] and scored["healthy-3x2"].got == []
    assert not any(s.silent_miss for s in scored.values())
    onset = scored["onset-2x4"].got[0]
    assert (onset[0], list(onset[2]), str(onset[3])) == ("faulty-machine", [2], "onset")
    for name in ("send-delay-3x2", "slow-rank-last-2x3"):
        assert scored[name].right_standing and not scored[name].right, name
    for name in ("dataloader-stall-2x3", "gc-pause-4x2", "healthy-2x3", "healthy-2x4", "healthy-3x2",
                 "layers-2x3",
                 "onset-2x4", "slow-rank-2x2", "slow-rank-2x3", "slow-rank-4x2", "var-seq-2x2"):
        assert scored[name].right, name
