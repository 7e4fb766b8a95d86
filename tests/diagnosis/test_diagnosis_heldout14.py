"""The fourteenth held-out part of the example job's recordings (``tests/data/kineto_widened/heldout14``,
20 recordings from a quiet, freshly booted machine, a balanced sample of the classes; its run-once
figure in docs/ACCURACY.md, "Thirteenth round"): which recordings the diagnosis gets right (top cause
and its ranks, scored by ``bench/recordings.py`` against ``injections.json``).

Pins the figure of its one run, made after every rule of the thirteenth round was merged: 20 of 20,
no false faulty machine or GC on its 3 healthy jobs, no silent miss. A rule change that loses a
recording fails here (the part is seen data from here on)."""

from __future__ import annotations

from tests._support.recorded import assert_part_shape, widened_part_score


def test_the_fourteenth_held_out_part_keeps_its_run_once_figure() -> None:
    scored, _got, missed = widened_part_score("heldout14", 20)
    assert missed == {}
    assert sum(s.right for s in scored.values()) == 20
    # both uneven partitions at their heavier stage: 1,2,1 -> stage 1 (ranks 2, 3); 2,1 -> stage 0
    assert_part_shape(scored, ["healthy-2x3", "healthy-2x4", "healthy-3x3"], ["onset-2x2", "onset-3x2"],
                      {"layers-2x3": [2, 3], "layers-3x2": [0, 1, 2]})
    assert scored["healthy-2x3"].got == [] and scored["healthy-3x3"].got == []
