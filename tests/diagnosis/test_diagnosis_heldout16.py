"""The sixteenth held-out part of the example job's recordings (``tests/data/kineto_widened/heldout16``,
20 recordings made beside other builds' work, a balanced sample of the classes; its run-once figure
in docs/ACCURACY.md, "Fifteenth round"): which recordings the diagnosis gets right (top cause and its
ranks, scored by ``bench/recordings.py`` against ``injections.json``).

Pins the figure of its one run, made after the fifteenth round's rule was committed: 19 of 20, no
false faulty machine or GC on its 3 healthy jobs, no silent miss; the one miss is a false slow
communication on ``healthy-3x3``. A rule change that loses a recording fails here (the part is seen
data from here on)."""

from __future__ import annotations

from tests._support.recorded import assert_part_shape, widened_part_score


def test_the_sixteenth_held_out_part_keeps_its_run_once_figure() -> None:
    scored, _got, missed = widened_part_score("heldout16", 20)
    assert set(missed) <= {"healthy-3x3"}
    assert sum(s.right for s in scored.values()) >= 19
    # both uneven partitions at their heavier stage: 1,2 -> stage 1 (ranks 3-5); 2,1,1 -> stage 0
    assert_part_shape(scored, ["healthy-2x4", "healthy-3x3", "healthy-4x2"], ["onset-2x4", "onset-3x2"],
                      {"layers-3x2": [3, 4, 5], "layers-2x3": [0, 1]})
    assert scored["healthy-4x2"].got == []
    # the weak slow rank (8 ms) and the one under the decomposition threshold (S 1.003) are named
    assert scored["slow-rank-weak-3x2"].got[0][:1] == ("faulty-machine",)
    assert list(scored["slow-rank-2x4"].got[0][2]) == [3]
