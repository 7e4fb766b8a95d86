"""The run-once figure of the sixth held-out part of the plain PyTorch recordings
(``tests/data/kineto_plain_heldout6``, docs/ACCURACY.md, "Sixth held-out part"): which recordings
the kernel-level diagnosis gets right (top cause and its ranks against ``injections.json``).

Pins the figure written in the docs, both ways: a rule change that loses a recording fails here,
and one that gains a missed one fails too, so the figure in the docs is updated with it (and then
stated as a second look, since this part is seen data after its one run)."""

from __future__ import annotations

from pathlib import Path

from tests._support.recorded import top_cause, truth

PART = Path(__file__).resolve().parents[1] / "data" / "kineto_plain_heldout6"
CAUSE_OF = (("slow_rank", "faulty-machine"), ("gc_rank", "gc-pause"), ("stall_rank", "dataloader-stall"))
# The figure of the one run: 7 of 11. Three slow ranks that fail one faulty-machine test each (no
# second measurement beside a noisy outlier z, persistence in 4 of 6 steps, one slow position in 5
# of 6), and a stall hidden by the transport-noise view's low bias.
MISSED: dict[str, tuple[str, list[int]]] = {
    "ddp-slow-3rank": ("none", []),
    "ddp-slow-4rank": ("none", []),
    "fsdp-slow-4rank": ("none", []),
    "fsdp-stall-3rank": ("none", []),
}


def _truth(folder: Path) -> tuple[str, list[int]]:
    inj = truth(folder)
    for key, cause in CAUSE_OF:
        if int(str(inj[key])) >= 0:
            return cause, [int(str(inj[key]))]
    return "none", []


def test_the_sixth_held_out_part_keeps_its_run_once_figure() -> None:
    folders = sorted(p for p in PART.iterdir() if (p / "injections.json").exists())
    assert len(folders) == 11
    got = {f.name: top_cause(f) for f in folders}
    right = {f.name for f in folders if got[f.name] == _truth(f)}
    assert {n: got[n] for n in sorted(set(got) - right)} == MISSED
    assert len(right) == 7
    # both healthy jobs name no cause; four of the seven slow ranks are found
    assert {"ddp-healthy-4rank", "fsdp-healthy-3rank"} <= right
    assert len({n for n in right if "-slow-" in n}) == 4
