"""One conformance suite for every registered detector: same shape, same contract, real traces."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from diagnosers.detectors import all_detectors, compute_stats
from diagnosers.detectors.base import CauseMatch
from diagnosers.diagnose import Diagnosis
from diagnosers.model import Trace
from diagnosers.report import WhatIfReport
from diagnosers.synth import ScenarioSpec, generate
from diagnosers.vocab import CAUSE_TO_CATEGORIES, CauseId, Pattern
from diagnosers.whatif import analyze, build_engine

DETECTORS = all_detectors()

# Synthetic jobs covering every cause the generator injects, plus a healthy one.
SYNTH = {
    "healthy": ScenarioSpec(dp=4, pp=4, microbatches=8, steps=4, seed=31),
    "stage": ScenarioSpec(dp=4, pp=4, microbatches=8, steps=4, seed=32, scenarios=["stage-imbalance"]),
    "seqlen": ScenarioSpec(
        dp=8, pp=2, microbatches=8, steps=4, seed=33, scenarios=["sequence-length-imbalance"]
    ),
    "gc": ScenarioSpec(dp=4, pp=4, microbatches=8, steps=4, seed=34, scenarios=["gc-pause"]),
    "faulty-host": ScenarioSpec(
        dp=8, pp=4, microbatches=8, steps=3, seed=35, scenarios=["faulty-machine"], host=2
    ),
    "slow-link": ScenarioSpec(dp=4, pp=4, microbatches=8, steps=3, seed=36, scenarios=["slow-communication"]),
    "stall": ScenarioSpec(dp=4, pp=4, microbatches=8, steps=4, seed=37, scenarios=["dataloader-stall"]),
}

_CACHE: dict[str, tuple[Trace, WhatIfReport, object]] = {}


def _prepared(name: str) -> tuple[Trace, WhatIfReport, object]:
    if name not in _CACHE:
        trace = generate(SYNTH[name]).trace
        eng = build_engine(trace)
        _CACHE[name] = (trace, analyze(trace, engine=eng), eng)
    return _CACHE[name]


def test_every_detectable_cause_has_exactly_one_registered_detector() -> None:
    expected = {
        CauseId.STAGE_IMBALANCE,
        CauseId.SEQUENCE_LENGTH_IMBALANCE,
        CauseId.GC_PAUSE,
        CauseId.FAULTY_MACHINE,
        CauseId.SLOW_COMMUNICATION,
        CauseId.DATALOADER_STALL,
    }
    assert set(DETECTORS) == expected


def check_match(m: CauseMatch, cause: CauseId, trace: Trace) -> None:
    """The contract every match obeys, whichever detector made it."""
    meta = trace.meta
    assert m.id is cause
    assert 0.0 <= m.confidence <= 1.0
    loc = m.location
    for field in ("dp_ranks", "pp_ranks", "ranks", "hosts", "steps"):
        vals = getattr(loc, field)
        assert vals == sorted(set(vals)), f"{field} must be sorted and unique"
    assert all(0 <= d < meta.dp for d in loc.dp_ranks)
    assert all(0 <= p < meta.pp for p in loc.pp_ranks)
    traced_ranks = set(int(r) for r in trace.ops.rank)
    assert set(loc.ranks) <= traced_ranks
    assert loc.hosts == sorted({r // meta.gpus_per_host for r in loc.ranks})
    assert set(loc.steps) <= set(trace.steps) and loc.steps
    assert loc.dp_ranks and loc.pp_ranks and loc.ranks  # every list names its members
    assert isinstance(m.pattern, Pattern) and m.pattern.spatial and m.pattern.temporal and m.pattern.resource
    json.dumps(m.evidence)  # plain numbers and strings only
    assert m.evidence
    assert m.summary and "\n" not in m.summary and len(m.summary) > 80
    assert m.categories == list(CAUSE_TO_CATEGORIES[cause])


@pytest.mark.parametrize("job", sorted(SYNTH))
@pytest.mark.parametrize("cause", sorted(DETECTORS, key=str))
def test_detector_conformance_on_synthetic_jobs(cause: CauseId, job: str) -> None:
    trace, report, eng = _prepared(job)
    stats = compute_stats(trace, eng)  # type: ignore[arg-type]
    m = DETECTORS[cause](report, stats)
    if m is not None:
        check_match(m, cause, trace)
    if job == "healthy":
        assert m is None, f"{cause} fired on a healthy job"


@pytest.mark.parametrize("name", ["ST", "AR", "SE"])
def test_detector_conformance_on_artifact_traces(
    name: str, artifact_diagnosis: Callable[[str], Diagnosis], artifact_dir
) -> None:
    from diagnosers.readers import ReadOptions, load_trace

    trace = load_trace(
        [artifact_dir / f"trace-{name}.parquet"], ReadOptions(meta_path=artifact_dir / f"meta-{name}.yaml")
    )
    for c in artifact_diagnosis(name).causes:
        check_match(c, c.id, trace)


@pytest.mark.parametrize("cause", sorted(DETECTORS, key=str))
def test_detectors_work_without_an_engine(cause: CauseId) -> None:
    """Without the what-if probe a detector falls back to the report's ratios, never crashes."""
    trace, report, _ = _prepared("stage")
    stats = compute_stats(trace)
    m = DETECTORS[cause](report, stats)
    if m is not None:
        check_match(m, cause, trace)


def test_a_healthy_report_matches_nothing_even_when_stats_are_noisy() -> None:
    """Below the decomposition threshold the compute detectors stay silent (METHOD.md A5)."""
    trace, report, eng = _prepared("healthy")
    assert report.slowdown < 1.03
    stats = compute_stats(trace, eng)  # type: ignore[arg-type]
    assert [c for c, fn in DETECTORS.items() if fn(report, stats) is not None] == []


OWN_JOB = {
    CauseId.STAGE_IMBALANCE: "stage",
    CauseId.SEQUENCE_LENGTH_IMBALANCE: "seqlen",
    CauseId.GC_PAUSE: "gc",
    CauseId.FAULTY_MACHINE: "faulty-host",
    CauseId.SLOW_COMMUNICATION: "slow-link",
    CauseId.DATALOADER_STALL: "stall",
}


@pytest.mark.parametrize("cause", sorted(OWN_JOB, key=str))
def test_each_detector_fires_on_its_own_cause_at_the_labelled_place(cause: CauseId) -> None:
    trace, report, eng = _prepared(OWN_JOB[cause])
    m = DETECTORS[cause](report, compute_stats(trace, eng))  # type: ignore[arg-type]
    assert m is not None
    label = next(c for c in generate(SYNTH[OWN_JOB[cause]]).labels.causes if c.id is cause)
    if cause is CauseId.GC_PAUSE:
        overlap = set(label.location.ranks) & set(m.location.ranks)
        assert len(overlap) >= 0.5 * len(set(label.location.ranks) | set(m.location.ranks))
    else:
        assert m.location.ranks == label.location.ranks
