"""The seventeenth held-out part of the example job's recordings (``tests/data/kineto_widened/heldout17``,
20 recordings made beside another build's benchmarks, a balanced sample of the classes; its run-once
figure in docs/ACCURACY.md, "Eighteenth round"): which recordings the diagnosis gets right (top cause
and its ranks, scored by ``bench/recordings.py`` against ``injections.json``).

Pins the figure of its one run, made after the eighteenth round's rules were committed: 19 of 20, no
false faulty machine or GC on its 3 healthy jobs, no silent miss; the one miss is a false slow
communication on ``healthy-3x2``. A rule change that loses a recording fails here (the part is seen
data from here on)."""

from __future__ import annotations

from tests._support.recorded import assert_part_shape, widened_part_score


def test_the_seventeenth_held_out_part_keeps_its_run_once_figure() -> None:
    scored, _got, missed = widened_part_score("heldout17", 20)
    assert set(missed) <= {"healthy-3x2"}
    assert sum(s.right for s in scored.values()) >= 19
    # both uneven partitions at their heavier stage: 2,1 -> stage 0 (ranks 0-1); 1,2,1,1 -> stage 1
    assert_part_shape(scored, ["healthy-2x2", "healthy-2x3", "healthy-3x2"], ["onset-2x2", "onset-3x2"],
                      {"layers-2x2": [0, 1], "layers-2x4": [2, 3]})
    assert scored["healthy-2x2"].got == [] and scored["healthy-2x3"].got == []
    # the weak slow rank (8 ms) is named at its place
    top = scored["slow-rank-weak-2x2"].got[0]
    assert (top[0], list(top[2])) == ("faulty-machine", [3])
