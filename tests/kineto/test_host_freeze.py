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
    return analyze(trace, engine=eng), compute_stats(trace, eng)


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


def test_the_detection_view_caps_a_freeze_as_host_noise() -> None:
    # the view keeps a collector's pause for the GC detector, but a freeze is the host's: capped
    # with the other host bursts, so no compute-side cause is judged with it
    trace = load_trace([FOLDER / "traces"])
    eng = build_engine(trace)
    view = detection_view(trace, eng, analyze(trace, engine=eng))
    assert view is not None and view.bursts is not None
    top = {(d, s) for d, s, _, _ in view.bursts.cells[:2]}
    assert {d for d, _ in top} == {0, 2} and len({s for _, s in top}) == 1
    assert min(x for _, _, x, _ in view.bursts.cells[:2]) > 0.6


def test_pauses_at_different_moments_or_of_different_lengths_are_no_freeze() -> None:
    # rank 2's long forward moved later by half its length, or cut to half its length: the
    # spans no longer coincide, and the two pauses are no freeze (collectors on their own schedules)
    _, stats = _judged()
    paused = above_tail(stats, paused_forwards(stats))
    rows = stats.fwd_index[paused]
    cell = stats.op_dp[rows].astype(np.int64)
    step_idx = stats.op_step_index[rows]
    assert simultaneous_freezes(stats, rows, cell, step_idx).sum() == 2
    late = rows[cell == 2]
    assert stats.op_start is not None
    start = stats.op_start.copy()
    start[late] += 0.5 * stats.transfer[late]
    assert not simultaneous_freezes(replace(stats, op_start=start), rows, cell, step_idx).any()
    dur = stats.transfer.copy()
    dur[late] *= 0.5
    assert not simultaneous_freezes(replace(stats, transfer=dur), rows, cell, step_idx).any()
    # one worker's pauses alone are never a freeze
    one = cell == 0
    assert not simultaneous_freezes(stats, rows[one], cell[one], step_idx[one]).any()
