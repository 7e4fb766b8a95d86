"""The eighteenth round's faulty-machine rules (docs/ACCURACY.md, "Eighteenth round"), each pinned on
the seen healthy job it fixes, with the tests it relies on checked on their own:

- a "host" of one traced worker (a worker wider than a host) passes the chance tests of a worker;
- the outlier-worker finding passes the chance tests ``detect`` puts one worker through
  (``faulty_machine.chance_alike``)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from diagnosers import whatif
from diagnosers.detectors import faulty_machine as fm
from diagnosers.detectors.base import host_cluster
from diagnosers.detectors.stats import compute_stats
from diagnosers.diagnose import diagnose
from diagnosers.synth import GeneratedJob, generate
from diagnosers.vocab import CauseId

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import heldout3


def _job(which: int | str, name: str) -> GeneratedJob:
    case = {c.name: c for c in heldout3.set3_cases(which)}[name]
    return generate(case.spec, case.cost)


def _no_machine(job: GeneratedJob) -> None:
    assert not job.labels.causes
    assert all(c.id not in (CauseId.FAULTY_MACHINE, CauseId.GC_PAUSE) for c in diagnose(job.trace).causes)


def test_a_host_of_one_worker_is_judged_as_a_worker() -> None:
    """Set 10 healthy-step-bursts-11: dp 2 x pp 11 at cp 8, 4 GPUs per host, so every worker is
    its own "host"; rank 16 burst in its last two of seven steps while another worker rose as
    high elsewhere (``onset_by_chance``), named an onset because the host path skipped the test."""
    job = _job(10, "healthy-step-bursts-11")
    engine = whatif.build_engine(job.trace)
    report = whatif.analyze(job.trace, engine=engine)
    st = compute_stats(job.trace, engine)
    found = fm._timings(st, report)
    assert found is not None
    timings, _, _ = found
    hosts = host_cluster(st, [t.cell for t in timings])  # as ``detect`` reads it
    timed = fm._over_time(timings, hosts)
    assert hosts is not None and timed is not None
    kept, is_onset = timed
    assert is_onset and len(kept) == 1 and host_cluster(st, [kept[0].cell]) is not None
    assert fm.onset_by_chance(st, kept)
    _no_machine(job)


def test_the_outlier_worker_passes_the_chance_tests_of_a_primary() -> None:
    """Set 11 healthy-step-noise-few-10 (2 x 11, 4 steps of +-26%) and healthy-step-bursts-9
    (16 x 11, 5 steps, bursts on 7% of the pairs): onsets by chance, which ``detect`` refuses or
    never saw and the outlier-worker finding named."""
    for name in ("healthy-step-noise-few-10", "healthy-step-bursts-9"):
        job = _job(11, name)
        engine = whatif.build_engine(job.trace)
        report = whatif.analyze(job.trace, engine=engine)
        st = compute_stats(job.trace, engine)
        m = fm.worker_matrix(report, "exact")
        p, d = (int(x) for x in np.unravel_index(int(np.argmax(m)), m.shape))
        t = fm.cell_timing(st, (d, p), fm.job_floor(st, [(d, p)]))
        assert t.onset is not None and fm.chance_alike(st, t, fm.job_floor(st, [(d, p)]))
        assert fm.outlier_worker(report, st) is None
        _no_machine(job)


def test_the_weak_machines_under_bursts_the_outlier_worker_finds_are_still_named() -> None:
    """The seen clear weak machines under bursts still come first, at their place."""
    for which, name in (("tune8", "faulty-weak-bursts-0"), (10, "faulty-weak-bursts-0")):
        job = _job(which, name)
        top = diagnose(job.trace).causes[0]
        label = job.labels.causes[0]
        assert top.id is CauseId.FAULTY_MACHINE and top.location.ranks == label.location.ranks
