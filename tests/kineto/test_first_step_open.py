"""A rank's idle time in its first profiled step counts from when it opened that step
(docs/ACCURACY.md, "The first profiled step counts from the rank's own step start"): the time
before its ``ProfilerStep#N`` began is its unprofiled previous step or the profiler's start-up,
while a dataloader fetch runs inside the step and stays a stall."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from diagnosers.detectors import compute_stats
from diagnosers.detectors.stats import _launch_idle
from diagnosers.model import OPTYPE_CODE
from diagnosers.readers import load_trace
from diagnosers.whatif import build_engine
from tests._support.recorded import top_cause

DATA = Path(__file__).resolve().parents[1] / "data"
FWD = OPTYPE_CODE["forward-compute"]


def _gaps(opened: np.ndarray | None) -> np.ndarray:
    # two steps (ids 2, 3) of two workers; worker 1 begins each forward 0.5 after worker 0 and
    # opened step 2 at 0.4, step 3 at 2.4
    start = np.array([0.0, 0.5, 2.0, 2.5])
    dur = np.ones(4)
    cell = np.array([0, 1, 2, 3])
    si = np.array([0, 0, 1, 1])
    return _launch_idle(np.full(4, FWD, dtype=np.int16), start, dur, cell, si, np.array([0.0, 2.0]), 4,
                        np.array([1.5, 3.5]), np.array([2, 3]), opened=opened)


def test_the_open_counts_in_the_first_profiled_step_only() -> None:
    assert _gaps(None) == pytest.approx([0.0, 0.5, 0.0, 0.5])
    # step 2 has no previous step in the profile: counted from worker 1's own open (0.4); step 3
    # counts from the job's step start (later than worker 1's end of step 2), its open ignored
    assert _gaps(np.array([0.0, 0.4, 2.0, 2.4])) == pytest.approx([0.0, 0.1, 0.0, 0.5])
    # an unknown open (NaN) leaves the gap as it was
    assert _gaps(np.array([np.nan, np.nan, np.nan, np.nan])) == pytest.approx([0.0, 0.5, 0.0, 0.5])


def _first_step_gaps(folder: Path) -> tuple[np.ndarray, dict[tuple[int, int], float]]:
    trace = load_trace([folder / "traces"])
    assert trace.graph is not None and trace.graph.opened is not None
    return compute_stats(trace, build_engine(trace)).launch_idle[0, :, 0], trace.graph.opened


def test_a_late_profile_start_is_no_input_stall() -> None:
    # held-out 8 ddp-healthy-2rank (a miss of its one run): rank 0 opened its first profiled step
    # 11.3 ms after rank 1, and that lag was read as an 11.8 ms stall before its first op
    folder = DATA / "kineto_plain_heldout8" / "ddp-healthy-2rank"
    gaps, opened = _first_step_gaps(folder)
    assert opened[(0, 2)] - opened[(1, 2)] > 0.010
    assert gaps.max() < 0.002
    assert top_cause(folder) == ("none", [])


def test_a_stall_in_the_first_profiled_step_is_kept() -> None:
    # held-out 3 fsdp-stall-2rank: rank 0's DataLoader waits 80 ms in step 2, the first profiled
    # one, inside the step it had opened before its peer
    folder = DATA / "kineto_plain_heldout3" / "fsdp-stall-2rank"
    gaps, opened = _first_step_gaps(folder)
    assert opened[(0, 2)] < opened[(1, 2)]
    assert gaps[0] > 0.070
    assert top_cause(folder) == ("dataloader-stall", [0])
