"""The tenth held-out part of the example job's recordings (``tests/data/kineto_widened/heldout10``,
a balanced sample of the classes; its run-once figure in docs/ACCURACY.md, "Ninth round"): which
recordings the diagnosis gets right (top cause and its ranks, scored by ``bench/recordings.py``
against ``injections.json``).

Pins the figure written in the docs, both ways: a rule change that loses a recording fails here,
and one that gains a missed one fails too, so the figure in the docs is updated with it (and then
stated as a second look, since this part is seen data after its one run)."""

from __future__ import annotations

from tests._support.recorded import widened_part_score

# The figure of the one run: 8 of 13 (the round's starting tree gets the same 8, with the same
# diagnoses: neither of the round's first two rules acts on this part), with onset-2x4 a silent
# miss. Recorded at load average 9-16: the step floors reach 45-61%. Pinned here now is the second
# look after the round's third rule (the outlier worker under the decomposition threshold, made on
# this part's silent miss: seen data, not a fresh figure): 9 of 13. The tenth round's rules
# (docs/ACCURACY.md, "Tenth round", made on this part among the seen ones: a second look again)
# clear healthy-2x3's false machine (rank 5's fastest backward of the window 0.61x its peer's
# fastest) and find slow-rank-2x3's and slow-rank-last-3x2's ranks from their fastest ops: 12 of 13.
# The twelfth round's third reading of the fastest-op finding (docs/ACCURACY.md, "Injected workers
# with no cause (twelfth round)": the fastest optimizer step, made on this part among the seen
# ones, a second look again) finds slow-rank-4x2's rank 2: 13 of 13.
# The misses: (top cause, its ranks) as diagnosed.
MISSED: dict[str, tuple[str, list[int]]] = {}


def test_the_tenth_held_out_part_keeps_its_second_look() -> None:
    scored, _got, missed = widened_part_score("heldout10", 13)
    assert missed == MISSED
    assert sum(s.right for s in scored.values()) == 13
    assert sum(s.right_standing for s in scored.values()) == 13
    # no healthy recording names a faulty machine (healthy-2x3 did until the tenth round); two
    # name no cause, healthy-3x2 only the example's standing last-stage load
    healthy = [n for n, s in scored.items() if s.healthy]
    assert sorted(healthy) == ["healthy-2x3", "healthy-2x4", "healthy-3x2"]
    assert not any(scored[n].false_machine_or_gc for n in healthy)
    assert scored["healthy-2x4"].got == [] and scored["healthy-2x3"].got == []
    assert [g[0] for g in scored["healthy-3x2"].got] == ["stage-imbalance"]
    # no silent miss: the onset under the decomposition threshold (S = 1.022; S_w names rank 3, 14
    # robust sigma out) is an outlier worker from step 4 on, at low confidence
    assert not any(s.silent_miss for s in scored.values())
    top = scored["onset-2x4"].got[0]
    assert (top[0], list(top[2]), str(top[3])) == ("faulty-machine", [3], "onset") and top[1] < 0.3
    for name in ("dataloader-stall-2x4", "gc-pause-4x2", "healthy-2x3", "healthy-2x4", "healthy-3x2",
                 "layers-2x4", "onset-2x4", "send-delay-3x2", "slow-rank-2x2", "slow-rank-2x3",
                 "slow-rank-4x2", "slow-rank-last-3x2", "var-seq-2x3"):
        assert scored[name].right, name
