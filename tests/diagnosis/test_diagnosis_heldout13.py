"""The thirteenth held-out part of the example job's recordings (``tests/data/kineto_widened/heldout13``,
20 recordings from a quiet machine, a balanced sample of the classes; its run-once figure and its second
look in docs/ACCURACY.md, "Twelfth round"): which recordings the diagnosis gets right (top cause and its
ranks, scored by ``bench/recordings.py`` against ``injections.json``).

Pins the figure written in the docs, both ways: a rule change that loses a recording fails here,
and one that gains a missed one fails too, so the figure in the docs is updated with it (and then
stated as a second look, since this part is seen data after its one run)."""

from __future__ import annotations

from tests._support.recorded import widened_part_score

# The figure of the one run, after the twelfth round's rules: 17 of 20 (the same with the example's
# standing last-stage load first), one false faulty machine on a healthy job (healthy-4x2: rank 3,
# 0.122, carried by its fast ops alone while its compute sat 0.99 sigma out of the job's floor) and
# no silent miss; the round's starting tree (63ac102) gives the same 17, recording for recording.
# The fast-op reading now carries a machine alone only where the worker's compute stands 2 sigma
# out of that floor: pinned here is that second look (docs/ACCURACY.md, "Twelfth round"; not a
# fresh figure): 18 of 20, no false machine or GC. The thirteenth round reads a partition the
# method's S hides (under the decomposition threshold, the stage with more layers whose compute
# follows them and whose own balancing gains at least 5%): layers-2x4 becomes right, 19 of 20 on a
# second look (docs/ACCURACY.md, "Stage imbalance the method's S hides, and a slow worker's row
# (thirteenth round)"). The misses: (top cause, its ranks) as diagnosed.
MISSED = {
    # nothing injected, S = 1.041: the last stage's standing load first (right alone), then a
    # slow link between ranks 0 and 2 (0.397) that nothing put there (its fastest backward sends
    # 8.4x its peer link's)
    "healthy-2x2": ("stage-imbalance", [2, 3]),
}


def test_the_thirteenth_held_out_part_keeps_its_second_look() -> None:
    scored, _got, missed = widened_part_score("heldout13", 20)
    assert missed == MISSED
    assert sum(s.right for s in scored.values()) == 19
    assert sum(s.right_standing for s in scored.values()) == 19
    healthy = sorted(n for n, s in scored.items() if s.healthy)
    assert healthy == ["healthy-2x2", "healthy-2x4", "healthy-3x2", "healthy-4x2"]
    assert not any(scored[n].false_machine_or_gc for n in healthy)
    assert scored["healthy-3x2"].got == [] and scored["healthy-4x2"].got == []
    assert not any(s.silent_miss for s in scored.values())
    assert scored["layers-2x4"].slowdown < 1.01
    for name in ("onset-2x3", "onset-4x2"):
        top = scored[name].got[0]
        assert (top[0], str(top[3])) == ("faulty-machine", "onset"), name
    for name in ("dataloader-stall-2x2", "dataloader-stall-3x2", "gc-pause-2x3", "healthy-2x4",
                 "healthy-3x2", "healthy-4x2", "layers-2x3", "layers-2x4", "onset-2x3", "onset-4x2",
                 "send-delay-2x3", "send-delay-4x2", "slow-rank-2x3", "slow-rank-2x4", "slow-rank-3x2",
                 "slow-rank-last-2x2", "slow-rank-last-4x2", "var-seq-2x3", "var-seq-4x2"):
        assert scored[name].right, name
