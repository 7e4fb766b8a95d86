"""The twentieth round's faulty-machine rule (docs/ACCURACY.md, "Twentieth round"), pinned on the
seen healthy jobs it fixes and on the seen weak machines it must keep: a worker hot in every step is
the job's own bursts by chance when N q^n, the expected count of the job's N workers that hot in
all n steps, reaches ``faulty_machine.EVERY_STEP_CHANCE`` (``every_step_chance``)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from diagnosers import whatif
from diagnosers.detectors import faulty_machine as fm
from diagnosers.detectors.peers import log_ratios
from diagnosers.detectors.stats import compute_stats
from diagnosers.diagnose import diagnose
from diagnosers.synth import GeneratedJob, generate
from diagnosers.vocab import CauseId

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import heldout3


def _job(which: int | str, name: str) -> GeneratedJob:
    case = {c.name: c for c in heldout3.set3_cases(which)}[name]
    return generate(case.spec, case.cost)


def _timing(job: GeneratedJob, cell: tuple[int, int]) -> tuple[object, fm.CellTiming]:
    engine = whatif.build_engine(job.trace)
    report = whatif.analyze(job.trace, engine=engine)
    st = compute_stats(job.trace, engine)
    found = fm._timings(st, report)
    assert found is not None
    timings, _, _ = found
    return st, next(t for t in timings if t.cell == cell)


def test_a_burst_worker_hot_in_every_one_of_few_steps_is_chance() -> None:
    """Set 8 healthy-step-bursts-9 and set 13 healthy-step-bursts-3: dp 16 x pp 11, 3 steps, bursts
    on 13% and 19% of the (step, worker) pairs; one of the 176 workers hot in all three steps was
    named faulty-machine 0.385 and 0.36. The expected count equals the plain count over the others'
    log ratios."""
    for which, name, cell in ((8, "healthy-step-bursts-9", None), (13, "healthy-step-bursts-3", (8, 5))):
        job = _job(which, name)
        assert not job.labels.causes
        if cell is not None:
            st, t = _timing(job, cell)
            assert (t.r >= 0.5 * t.typical).all() and t.onset is None
            chance = fm.every_step_chance(st, [t])
            lr = log_ratios(st.compute, exclude=[cell])  # type: ignore[attr-defined]
            others = lr[:, np.isfinite(lr).all(axis=0)]
            q = float(np.mean(others >= 0.5 * t.typical))
            assert chance is not None and abs(chance - 176 * q**3) < 1e-12
            assert chance >= fm.EVERY_STEP_CHANCE
        causes = diagnose(job.trace).causes
        assert all(c.id not in (CauseId.FAULTY_MACHINE, CauseId.GC_PAUSE) for c in causes)


def test_the_clear_weak_machines_hot_in_every_step_are_still_named() -> None:
    """The seen clear weak machines under bursts with the highest expected count (set 9
    faulty-weak-bursts-5: 0.046; set 10 faulty-weak-bursts-3: 0.021) still come first, at their
    place."""
    for which, name in ((9, "faulty-weak-bursts-5"), (10, "faulty-weak-bursts-3")):
        job = _job(which, name)
        top = diagnose(job.trace).causes[0]
        label = job.labels.causes[0]
        assert top.id is CauseId.FAULTY_MACHINE and top.location.ranks == label.location.ranks
