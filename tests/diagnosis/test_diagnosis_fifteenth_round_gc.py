"""Job-wide stalls read as GC pauses in small generated jobs (docs/ACCURACY.md, "Fifteenth and
sixteenth rounds"), pinned on the seen jobs of synthetic sets 8 and 9 that needed them:

- two workers stopped at one moment are one freeze when their *pauses* overlap, whatever their
  forwards' own compute does (``gc_pause.simultaneous_freezes`` with ``pause``): set 8
  ``job-stall-small-1``, two DP ranks stopped 0.1 ms apart whose forward spans overlap 89%;
- with two workers and a short window, two equal stalls are equal within what the job measures a
  pause to (``gc_pause.job_wide_stall_steps`` with ``unpaused``): set 8 ``job-stall-small-11`` and
  set 9 ``job-stall-small-6``, one stall in both stages' first forwards read 7.6% and 5.4% apart.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from diagnosers.detectors import gc_pause as gc
from diagnosers.detectors.base import TraceStats
from diagnosers.detectors.stats import compute_stats
from diagnosers.diagnose import diagnose
from diagnosers.synth import GeneratedJob, generate
from diagnosers.vocab import CauseId

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import heldout3


def _job(which: int, name: str) -> GeneratedJob:
    case = {c.name: c for c in heldout3.set3_cases(which)}[name]
    return generate(case.spec, case.cost)


@pytest.mark.parametrize(("which", "name"), [(8, "job-stall-small-1"), (8, "job-stall-small-11"),
                                             (9, "job-stall-small-6")])
def test_the_small_jobs_stall_is_no_gc(which: int, name: str) -> None:
    job = _job(which, name)
    assert not job.labels.causes and job.labels.job_stall_steps
    causes = diagnose(job.trace).causes
    assert all(c.id not in (CauseId.GC_PAUSE, CauseId.FAULTY_MACHINE) for c in causes)


def _paused(job: GeneratedJob) -> tuple[TraceStats, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    st = compute_stats(job.trace)
    flagged = gc.paused_forwards(st)
    paused = gc.above_tail(st, flagged)
    rows = st.fwd_index[paused]
    cell = st.op_dp[rows].astype(np.int64) * st.pp + st.op_pp[rows]
    return st, rows, cell, paused, flagged


def test_the_freeze_is_read_from_the_pauses_not_the_forwards_spans() -> None:
    st, rows, cell, paused, _ = _paused(_job(8, "job-stall-small-1"))
    step_idx = st.op_step_index[rows]
    assert len(rows) == 2 and len(set(step_idx.tolist())) == 1
    # the forwards' spans overlap under FREEZE_OVERLAP (their own compute moves with step noise) ...
    assert not gc.simultaneous_freezes(st, rows, cell, step_idx).any()
    # ... the pauses, taken from the ops' starts, overlap above it
    pause = np.maximum(st.fwd_excess[paused], 0.0)
    assert gc.simultaneous_freezes(st, rows, cell, step_idx, pause).all()


@pytest.mark.parametrize(("which", "name"), [(8, "job-stall-small-11"), (9, "job-stall-small-6")])
def test_two_equal_stalls_are_equal_within_the_jobs_precision(which: int, name: str) -> None:
    st, rows, cell, paused, flagged = _paused(_job(which, name))
    step_idx = st.op_step_index[rows]
    excess = st.fwd_excess[paused]
    gap = float(excess.max() - excess.min())
    assert gap > gc.PAIR_STALL_SAME_LENGTH * float(excess.max())  # over the plain 5% ...
    assert gc.job_wide_stall_steps(st, cell, step_idx, excess) == []
    unpaused = st.fwd_excess[~flagged]
    # ... within three standard deviations of the difference of two excesses as noisy as the rest
    assert gap <= gc.PAIR_STALL_PRECISION_Z * np.sqrt(2.0) * float(np.std(unpaused))
    assert gc.job_wide_stall_steps(st, cell, step_idx, excess, unpaused) == [1]


def test_overlap_is_the_plain_shared_share_of_the_longer() -> None:
    assert gc._overlaps(0.0, 1.0, 0.05, 1.0)  # 0.95 of the longer
    assert not gc._overlaps(0.0, 1.0, 0.2, 1.1)  # 0.8 of it
    assert not gc._overlaps(0.0, 0.0, 0.0, 0.0)  # nothing to overlap
