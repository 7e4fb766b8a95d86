"""Faulty machine on healthy generated jobs (docs/ACCURACY.md, "Fourteenth round"), pinned on the
seen jobs of synthetic set 7 that needed it and on the seen true machines nearest each bar:

- a faulty machine runs at least ``FAULT_MIN_EXCESS`` (5%, 8% since the seventeenth round) over its
  peers: set 7 ``job-stall-small-4`` (a GPU 2.3% slower than its one peer on a quiet floor) names
  nothing;
- an onset that another worker's window of as many slow steps matches (``window_rise``), or that
  the other stages do not see where the cell has one stage peer, is chance (``onset_by_chance``):
  set 7 ``healthy-step-bursts-0`` and ``job-stall-small-5`` name nothing, while every seen real onset
  keeps its finding;
- the fleet's persistent spread is never above the covariance of the workers' ratios between the
  even and the odd steps (``peers.split_half_spread``): set 7 ``faulty-weak-step-noise-6``'s 1.58x
  machine, hidden by a spread two noisy MADs made up, is named;
- a DP group at its peer groups' pace is no place for slow communication
  (``slow_communication.group_stands_out``): set 7 ``healthy-noisy-0`` and ``-5`` name nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from diagnosers.detectors import faulty_machine as fm
from diagnosers.detectors import peers
from diagnosers.detectors import slow_communication as sc
from diagnosers.detectors.stats import compute_stats
from diagnosers.diagnose import diagnose
from diagnosers.synth import GeneratedJob, generate
from diagnosers.vocab import CauseId, Temporal
from diagnosers.whatif import build_engine
from tests._support.recorded import widened_causes, widened_folder

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import heldout3


def _job(name: str) -> GeneratedJob:
    case = {c.name: c for c in heldout3.set3_cases(7)}[name]
    return generate(case.spec, case.cost)


@pytest.mark.parametrize("name", ["job-stall-small-4", "job-stall-small-5", "healthy-step-bursts-0"])
def test_the_set7_healthy_jobs_name_no_machine(name: str) -> None:
    job = _job(name)
    d = diagnose(job.trace)
    assert not job.labels.causes
    assert all(c.id not in (CauseId.FAULTY_MACHINE, CauseId.GC_PAUSE) for c in d.causes)


def test_a_gpu_2_percent_slower_than_its_one_peer_is_under_the_bar() -> None:
    job = _job("job-stall-small-4")
    st = compute_stats(job.trace)
    ratio = peers.peer_ratio(st.compute, (1, 0))
    # slower in every step, many step sigmas out on a quiet floor, but by a fleet's few percent
    assert (ratio > 1.01).all() and float(ratio.mean()) - 1.0 < fm.FAULT_MIN_EXCESS


def test_window_rise_is_the_plain_lowest_step_over_the_rest() -> None:
    rng = np.random.default_rng(7)
    series = rng.normal(0.0, 0.2, (7, 5))
    for m in (1, 2, 3, 6):
        want = np.full(5, -np.inf)
        for j in range(5):
            for a in range(7 - m + 1):
                win = series[a:a + m, j]
                rest = np.delete(series[:, j], range(a, a + m))
                want[j] = max(want[j], win.min() - max(rest.mean(), 0.0))
        np.testing.assert_allclose(fm.window_rise(series, m), want, rtol=0, atol=1e-12)


def test_a_spike_is_no_rise_and_a_worker_faster_elsewhere_does_not_rise() -> None:
    spike = np.log(np.array([[1.0], [1.0], [3.5], [1.0], [1.0], [1.0]]))
    assert float(fm.window_rise(spike, 3)[0]) <= 0.0
    faster_after = np.log(np.array([[1.0], [1.0], [1.0], [0.4], [0.5], [0.45]]))
    assert float(fm.window_rise(faster_after, 3)[0]) <= 0.0
    burst = np.log(np.array([[1.0], [1.0], [1.5], [1.4], [1.0], [1.0]]))
    assert float(fm.window_rise(burst, 2)[0]) == pytest.approx(np.log(1.4))


def test_the_bursts_job_has_look_alikes_of_its_onset() -> None:
    """healthy-step-bursts-0: dp 14 x pp 2, 4 steps; rank 4 (dp 1, stage 0) hit in its last two steps,
    and other workers of the job in two steps in a row elsewhere, as far over their peers."""
    job = _job("healthy-step-bursts-0")
    st = compute_stats(job.trace)
    r = peers.peer_ratio(st.compute, (1, 0))
    assert (r[2:] > 1.3).all() and (r[:2] < 1.0).all()
    others = peers.log_ratios(st.compute, exclude=[(1, 0)])
    finite = np.isfinite(others).all(axis=0)
    rise = fm.window_rise(others[:, finite], 2)
    jump = float(np.mean(np.log(r[2:])) - np.mean(np.log(r[:2])))
    assert int((rise >= fm.ONSET_LOOKALIKE * jump).sum()) >= 1


def test_the_one_peer_onset_is_flat_against_the_other_stage() -> None:
    """job-stall-small-5: 2 x 2, 5 steps of heavy step noise; rank 4's ratio to its one peer jumps
    from 0.72-0.81 to 1.16-1.24 because the peer ran fast later, not because rank 4 slowed."""
    job = _job("job-stall-small-5")
    st = compute_stats(job.trace)
    r = np.log(peers.peer_ratio(st.compute, (0, 1)))
    peer_jump = float(r[2:].mean() - r[:2].mean())
    logs = np.log(st.compute)
    centred = logs - np.median(logs, axis=0)[None]
    wide = centred[:, 0, 1] - np.median(centred[:, :, 0], axis=1)
    assert peer_jump > 0.4
    assert float(wide[2:].mean() - wide[:2].mean()) < fm.ONSET_WIDE * peer_jump


@pytest.mark.parametrize(
    ("part", "name", "rank"),
    [
        ("heldout", "onset-4x2", 5),
        ("heldout4", "onset-4x2", 2),  # a worker faster in the onset's steps: no look-alike
        ("heldout7", "onset-3x2", 1),  # another worker's 2.2x single step: no rise over 4 steps
        ("heldout13", "onset-4x2", 2),
        ("heldout14", "onset-3x2", 1),
    ],
)
def test_the_seen_real_onsets_keep_their_finding(part: str, name: str, rank: int) -> None:
    causes = widened_causes(widened_folder(part, name))
    assert causes and causes[0][0] == CauseId.FAULTY_MACHINE and rank in causes[0][1]


def test_the_split_half_spread_is_the_plain_covariance() -> None:
    rng = np.random.default_rng(3)
    persistent = rng.normal(0.0, 0.05, 12)
    r = persistent[None, :] + rng.normal(0.0, 0.2, (9, 12))
    a, b = r[0::2].mean(axis=0), r[1::2].mean(axis=0)
    want = np.sqrt(max(np.cov(a, b, bias=True)[0, 1], 0.0))
    assert peers.split_half_spread(r) == pytest.approx(want, rel=1e-12)
    assert peers.split_half_spread(r[:1]) is None and peers.split_half_spread(r[:, :2]) is None


def test_the_weak_machine_under_step_noise_is_named() -> None:
    job = _job("faulty-weak-step-noise-6")
    st = compute_stats(job.trace)
    floor = fm.job_floor(st, [(6, 0)])
    # the two MADs read a fleet spread of ~0.15; the halves of the steps share none of it
    assert floor.worker > 0.15 and floor.split is not None and floor.split < 0.01
    assert floor.fleet_sigma() == pytest.approx(floor.split)
    d = diagnose(job.trace)
    top = d.causes[0]
    assert top.id == CauseId.FAULTY_MACHINE and top.location.ranks == [12]
    assert top.pattern.temporal == Temporal.PERSISTENT


@pytest.mark.parametrize("name", ["healthy-noisy-0", "healthy-noisy-5"])
def test_a_dp_group_at_its_peers_pace_is_no_place(name: str) -> None:
    """Heavy per-op noise: idealising one stage's DP group removes 29-47% of S's excess, but its
    collectives run at its peer groups' pace, so it carries no slow communication."""
    job = _job(name)
    d = diagnose(job.trace)
    assert d.slowdown > 1.03 and not d.causes


def test_the_dp_groups_of_the_noisy_job_do_not_stand_out() -> None:
    job = _job("healthy-noisy-0")
    trace = job.trace
    st = compute_stats(trace, build_engine(trace))
    assert st.probe is not None
    for stage in range(st.pp):
        cells = [(d, stage) for d in range(st.dp)]
        assert not sc.group_stands_out(st, st.probe.original, f"dp group of stage {stage}", cells)

