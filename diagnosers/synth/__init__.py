"""Synthetic job generator: pipeline schedules, a cost model, its own event loop, injected causes.

``generate(ScenarioSpec(...))`` returns a :class:`GeneratedJob` (a ``Trace`` and its ``Labels``)
in-process; ``diagnosers.writers`` writes it in the artifact's parquet schema, meta yaml and the
native JSON Lines format; ``diagnosers.synth.corpus`` lists the labelled scenario corpus.
"""

from diagnosers.synth.cost import CostModel
from diagnosers.synth.generate import GeneratedJob, generate
from diagnosers.synth.spec import (
    DEFAULT_MAGNITUDE,
    MAGNITUDE_MEANING,
    CauseLabel,
    Labels,
    Scenario,
    ScenarioSpec,
    Schedule,
)

__all__ = [
    "DEFAULT_MAGNITUDE",
    "MAGNITUDE_MEANING",
    "CauseLabel",
    "CostModel",
    "GeneratedJob",
    "Labels",
    "Scenario",
    "ScenarioSpec",
    "Schedule",
    "demo_job",
    "generate",
]


def demo_job(seed: int = 0) -> GeneratedJob:
    """A small stage-imbalanced job (dp 2 × pp 4, 8 microbatches, 4 steps) that generates in ms."""
    return generate(ScenarioSpec(dp=2, pp=4, microbatches=8, steps=4,
                                 scenarios=[Scenario.STAGE_IMBALANCE], seed=seed,
                                 trial_name="demo"))
