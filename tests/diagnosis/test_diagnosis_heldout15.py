"""The fifteenth held-out part of the example job's recordings (``tests/data/kineto_widened/heldout15``,
20 recordings from a busy host, one extra process spinning on a core throughout, a balanced sample
of the classes; its run-once figure in docs/ACCURACY.md, "Fourteenth round"): which recordings the
diagnosis gets right (top cause and its ranks, scored by ``bench/recordings.py`` against
``injections.json``).

Pins the figure of its one run, made after every rule of the fourteenth round was merged: 20 of 20,
no false faulty machine or GC on its 3 healthy jobs, no silent miss. A rule change that loses a
recording fails here (the part is seen data from here on)."""

from __future__ import annotations

from tests._support.recorded import assert_part_shape, widened_part_score


def test_the_fifteenth_held_out_part_keeps_its_run_once_figure() -> None:
    scored, _got, missed = widened_part_score("heldout15", 20)
    assert missed == {}
    assert sum(s.right for s in scored.values()) == 20
    # both uneven partitions at their heavier stage: 1,2 -> stage 1 (ranks 2, 3); 1,1,2,1 -> stage 2
    assert_part_shape(scored, ["healthy-2x2", "healthy-2x3", "healthy-3x2"], ["onset-2x2", "onset-2x3"],
                      {"layers-2x2": [2, 3], "layers-2x4": [4, 5]})
    assert scored["healthy-2x2"].got == []
    # the input stalls at their rank, the slow sends at their link's two ends
    assert scored["dataloader-stall-2x2"].got[0][2] == [3]
    assert scored["dataloader-stall-3x2"].got[0][2] == [2]
    assert list(scored["send-delay-2x3"].got[0][2]) == [1, 3]
    assert list(scored["send-delay-3x2"].got[0][2]) == [0, 3]
