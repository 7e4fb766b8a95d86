"""The run-once figure of the sixth held-out part of the plain PyTorch recordings
(``tests/data/kineto_plain_heldout6``, docs/ACCURACY.md, "Sixth held-out part"): which recordings
the kernel-level diagnosis gets right (top cause and its ranks against ``injections.json``).

Pins the figure written in the docs, both ways: a rule change that loses a recording fails here,
and one that gains a missed one fails too, so the figure in the docs is updated with it (and then
stated as a second look, since this part is seen data after its one run)."""

from __future__ import annotations

from tests._support.recorded import plain_part_score

# The figure of the one run: 7 of 11. Three slow ranks that fail one faulty-machine test each (no
# second measurement beside a noisy outlier z, persistence in 4 of 6 steps, one slow position in 5
# of 6), and a stall hidden by the transport-noise view's low bias.
MISSED: dict[str, tuple[str, list[int]]] = {
    "ddp-slow-3rank": ("none", []),
    "ddp-slow-4rank": ("none", []),
    "fsdp-slow-4rank": ("none", []),
    "fsdp-stall-3rank": ("none", []),
}


def test_the_sixth_held_out_part_keeps_its_run_once_figure() -> None:
    right, missed = plain_part_score("kineto_plain_heldout6", 11)
    assert missed == MISSED
    assert len(right) == 7
    # both healthy jobs name no cause; four of the seven slow ranks are found
    assert {"ddp-healthy-4rank", "fsdp-healthy-3rank"} <= right
    assert len({n for n in right if "-slow-" in n}) == 4
