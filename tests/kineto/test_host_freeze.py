"""A freeze of several workers at one moment is no GC pause (``gc_pause.simultaneous_freezes``),
on the real recording that showed it: the fifth held-out part's ``fsdp-slow-3rank`` (seen data
since its run), where the forwards of ranks 0 and 2 began within a millisecond of each other in
one step and ran about 730 ms each. A collector stops one process on its own schedule."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from diagnosers.detectors import compute_stats, gc_pause
from diagnosers.detectors.base import TraceStats
from diagnosers.detectors.gc_pause import above_tail, paused_forwards, simultaneous_freezes
from diagnosers.readers import load_trace
from diagnosers.report import WhatIfReport
from diagnosers.transport_noise import detection_view
from diagnosers.whatif import analyze, build_engine

FOLDER = Path(__file__).resolve().parents[1] / "data" / "kineto_plain_heldout5" / "fsdp-slow-3rank"


def _judged() -> tuple[WhatIfReport, TraceStats]:
    trace = load_trace([FOLDER / "traces"])
    eng = build_engine(trace)
    report = analyze(trace, engine=eng)
    view = detection_view(trace, eng, report)
    if view is None:
        return report, compute_stats(trace, eng)
    return view.report, view.stats


def test_two_workers_stopped_at_one_moment_for_as_long_are_one_freeze_not_gc() -> None:
    report, stats = _judged()
    paused = above_tail(stats, paused_forwards(stats))
    rows = stats.fwd_index[paused]
    cell = stats.op_dp[rows].astype(np.int64)
    step_idx = stats.op_step_index[rows]
    frozen = simultaneous_freezes(stats, rows, cell, step_idx)
    # the two long forwards of ranks 0 and 2, in the same step, are the freeze
    assert sorted(cell[frozen].tolist()) == [0, 2] and len(set(step_idx[frozen].tolist())) == 1
    assert stats.op_start is not None
    start = stats.op_start[rows[frozen]]
    dur = stats.transfer[rows[frozen]]
    assert abs(start[0] - start[1]) < 0.002 and dur.min() > 0.6 and dur.max() / dur.min() < 1.05
    assert gc_pause.detect(report, stats) is None
    assert any(n.startswith("host-wide freeze: the forwards of DP ranks [0, 2]") for n in stats.notes)


def test_the_same_pauses_at_different_moments_are_collections_again() -> None:
    # move rank 2's long forward later by half its length: the spans no longer coincide, and the
    # two pauses read as collectors on their own schedules, as before the rule
    report, stats = _judged()
    paused = above_tail(stats, paused_forwards(stats))
    rows = stats.fwd_index[paused]
    late = rows[stats.op_dp[rows] == 2]
    assert stats.op_start is not None
    start = stats.op_start.copy()
    start[late] += 0.5 * stats.transfer[late]
    moved = replace(stats, op_start=start, notes=[])
    found = gc_pause.detect(report, moved)
    assert found is not None and sorted(found.location.ranks) == [0, 2]
