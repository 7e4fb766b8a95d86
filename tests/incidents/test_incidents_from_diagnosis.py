"""End to end: a generated job's diagnosis, passed through the engine's ``similar`` hook, lands on
past cases of the same cause whose recorded shape is the closest the library has."""

from __future__ import annotations

import pytest

from diagnosers.diagnose import diagnose
from diagnosers.synth import Scenario, ScenarioSpec, generate
from diagnosers.vocab import Pattern
from incidents import Library, similar_incidents
from incidents.similar import CLOSENESS, UNKNOWN_CREDIT, _pattern_codes


def _agreement(a: Pattern, b: Pattern) -> float:
    total = 0.0
    for k, (x, y) in enumerate(zip(_pattern_codes(a), _pattern_codes(b), strict=True)):
        total += UNKNOWN_CREDIT if x is None or y is None else float(CLOSENESS[k][x, y])
    return total


@pytest.mark.parametrize(
    "scenario",
    [Scenario.STAGE_IMBALANCE, Scenario.SEQUENCE_LENGTH_IMBALANCE, Scenario.GC_PAUSE,
     Scenario.FAULTY_MACHINE, Scenario.SLOW_COMMUNICATION, Scenario.DATALOADER_STALL],
)
def test_diagnosed_job_finds_cases_of_its_cause_and_shape(scenario: Scenario, library: Library) -> None:
    job = generate(ScenarioSpec(dp=4, pp=4, microbatches=8, steps=4, scenarios=[scenario], seed=3))
    diagnosis = diagnose(job.trace, similar=similar_incidents)
    assert diagnosis.causes, f"{scenario}: nothing diagnosed"
    top_cause = diagnosis.causes[0]
    assert diagnosis.similar_incidents, f"{scenario}: no similar incidents attached"
    case = library.get(diagnosis.similar_incidents[0].id)
    assert top_cause.id in case.causes

    def best_shape(c_id: str) -> float:
        sigs = [s for s in library.get(c_id).signature if s.cause == top_cause.id]
        return max((_agreement(top_cause.pattern, s.pattern) for s in sigs), default=0.0)

    candidates = [c.id for c in library.cases.values() if top_cause.id in c.causes]
    assert best_shape(case.id) == max(best_shape(c) for c in candidates), (scenario, case.id)
    assert any("shape" in r for r in diagnosis.similar_incidents[0].reasons)
