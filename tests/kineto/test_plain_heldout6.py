"""The run-once figure of the sixth held-out part of the plain PyTorch recordings
(``tests/data/kineto_plain_heldout6``, docs/ACCURACY.md, "Sixth held-out part"): which recordings
the kernel-level diagnosis gets right (top cause and its ranks against ``injections.json``).

Pins the figure written in the docs, both ways: a rule change that loses a recording fails here,
and one that gains a missed one fails too, so the figure in the docs is updated with it (and then
stated as a second look, since this part is seen data after its one run). Since the fast-step
round (docs/ACCURACY.md, "The fast-step round") every recording of it is right on the second
look: 11 of 11; the run-once figure stays 7 of 11."""

from __future__ import annotations

from tests._support.recorded import plain_part_score

# The figure of the one run: 7 of 11. Three slow ranks that fail one faulty-machine test each (no
# second measurement beside a noisy outlier z, persistence in 4 of 6 steps, one slow position in 5
# of 6), and a stall hidden by the transport-noise view's low bias.
RUN_ONCE_MISSED: dict[str, tuple[str, list[int]]] = {
    "ddp-slow-3rank": ("none", []),
    "ddp-slow-4rank": ("none", []),
    "fsdp-slow-4rank": ("none", []),
    "fsdp-stall-3rank": ("none", []),
}

# The second look (seen data, after the fast-step round): the three slow ranks found by their
# fastest steps, the stall by the gap test against the unexplained time.
MISSED: dict[str, tuple[str, list[int]]] = {}


def test_the_sixth_held_out_part_keeps_its_second_look_figure() -> None:
    right, missed = plain_part_score("kineto_plain_heldout6", 11)
    assert missed == MISSED
    assert len(right) == 11
    # both healthy jobs name no cause; the run-once misses are the ones the round found
    assert {"ddp-healthy-4rank", "fsdp-healthy-3rank"} <= right
    assert set(RUN_ONCE_MISSED) <= right
