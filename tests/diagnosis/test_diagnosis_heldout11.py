"""The eleventh held-out part of the example job's recordings (``tests/data/kineto_widened/heldout11``,
a balanced sample of the classes; its run-once figure in docs/ACCURACY.md, "Tenth round"): which
recordings the diagnosis gets right (top cause and its ranks, scored by ``bench/recordings.py``
against ``injections.json``).

Pins the figure written in the docs (now its second look), both ways: a rule change that loses a
recording fails here, and one that gains a missed one fails too, so the figure in the docs is
updated with it (and then stated as a second look, since this part is seen data after its one run)."""

from __future__ import annotations

from tests._support.recorded import widened_part_score

# The figure of the one run, after the tenth round's rules: 9 of 13, no false faulty machine or GC
# on the three healthy jobs, no silent miss (the round's starting tree: 8 of 13, slow-rank-3x2 a
# faulty machine at the wrong rank, 4). Pinned here now is the second look after the eleventh
# round's rules (docs/ACCURACY.md, "Eleventh round", made on this part among the seen ones: not a
# fresh figure): 10 of 13. healthy-3x3 keeps only the last stage's standing load (its false slow
# communication was on host 0, which holds 8 of the job's 9 ranks: no host candidate now).
# slow-rank-2x2 was rank 0's faulty machine under that round's rule 37 (a DP-2 row carried by one
# worker), taken out again after the twelfth part's healthy-2x4 broke its premise. The thirteenth
# round's stage rule (a row left with one DP rank once its slow machine is set aside must carry the
# stage's weight in every step itself, where no partition gives the stage more layers) leaves the
# first stage's row to rank 0's faulty machine again: 11 of 13 (docs/ACCURACY.md, "Stage imbalance
# the method's S hides, and a slow worker's row (thirteenth round)"). The misses: (top cause, its
# ranks) as diagnosed.
MISSED = {
    # 15 ms in rank 2's forward sends (stage 1, DP 2; S = 1.157): no cause; the step floor is 37%
    "send-delay-2x4": ("none", []),
    # 12 ms on rank 6 (dp 2, last stage, DP 4): only the last stage's standing load; rank 6 is not
    # S_w's hottest (rank 7 and rank 4 are) and its fastest forward and backward run 1.33x and 1.18x
    # its peers', under the outlier findings' 1.5x
    "slow-rank-last-4x2": ("stage-imbalance", [4, 5, 6, 7]),
}


def test_the_eleventh_held_out_part_keeps_its_second_look() -> None:
    scored, _got, missed = widened_part_score("heldout11", 13)
    assert missed == MISSED
    assert sum(s.right for s in scored.values()) == 11
    assert sum(s.right_standing for s in scored.values()) == 11
    healthy = [n for n, s in scored.items() if s.healthy]
    assert sorted(healthy) == ["healthy-2x2", "healthy-3x3", "healthy-4x2"]
    assert not any(scored[n].false_machine_or_gc for n in healthy)
    assert scored["healthy-2x2"].got == [] and scored["healthy-4x2"].got == []
    assert [g[0] for g in scored["healthy-3x3"].got] == ["stage-imbalance"]
    assert not any(s.silent_miss for s in scored.values())
    # the DP-3 first-stage slow rank is found from its fastest ops (main's rules named rank 4)
    top = scored["slow-rank-3x2"].got[0]
    assert (top[0], list(top[2])) == ("faulty-machine", [2]) and top[1] < 0.3
    onset = scored["onset-3x2"].got[0]
    assert (onset[0], list(onset[2]), str(onset[3])) == ("faulty-machine", [4], "onset")
    for name in ("dataloader-stall-4x2", "gc-pause-2x3", "healthy-2x2", "healthy-3x3", "healthy-4x2",
                 "layers-2x3", "onset-3x2", "slow-rank-2x2", "slow-rank-2x4", "slow-rank-3x2",
                 "var-seq-3x2"):
        assert scored[name].right, name
