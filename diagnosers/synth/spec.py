"""Scenario specs and ground-truth labels of the synthetic job generator (pydantic models).

A :class:`ScenarioSpec` says what job to build (parallel sizes, schedule, microbatches, steps) and
which causes to inject; :class:`Labels` is what was injected, in the shared ``Location`` vocabulary,
so scoring a diagnosis against it is a direct comparison. ``labels.json`` is
``Labels.model_dump(mode="json")``: ``{"causes": [{"id", "magnitude", "location", "true_marginal"}],
"expected_straggling"}``.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from diagnosers.signature import CauseSignature
from diagnosers.vocab import (
    DEFAULT_GPUS_PER_HOST,
    CauseId,
    Location,
    Pattern,
    Resource,
    Spatial,
    Temporal,
)


class Schedule(StrEnum):
    """Pipeline schedules the generator can run."""

    ONE_F_ONE_B = "1f1b"
    INTERLEAVED = "interleaved"
    GPIPE = "gpipe"


class Scenario(StrEnum):
    """Injectable scenarios. ``stage-imbalance-first`` is labelled as ``stage-imbalance`` on stage 0."""

    NONE = "none"
    STAGE_IMBALANCE = "stage-imbalance"
    STAGE_IMBALANCE_FIRST = "stage-imbalance-first"
    SEQUENCE_LENGTH_IMBALANCE = "sequence-length-imbalance"
    GC_PAUSE = "gc-pause"
    FAULTY_MACHINE = "faulty-machine"
    SLOW_COMMUNICATION = "slow-communication"
    DATALOADER_STALL = "dataloader-stall"
    # Added for the widened tuning data; the scenarios above keep their meaning.
    STAGE_IMBALANCE_LAYERS = "stage-imbalance-layers"
    SLOW_DP_GROUP = "slow-dp-group"
    JOB_STALL = "job-stall"


# The default ``magnitude`` per scenario; MAGNITUDE_MEANING says what it measures (docs/GENERATOR.md
# lists the same).
DEFAULT_MAGNITUDE: dict[Scenario, float] = {
    Scenario.NONE: 0.0,
    Scenario.STAGE_IMBALANCE: 2.0,
    Scenario.STAGE_IMBALANCE_FIRST: 1.6,
    Scenario.SEQUENCE_LENGTH_IMBALANCE: 32.0,
    Scenario.GC_PAUSE: 0.3,
    Scenario.FAULTY_MACHINE: 2.0,
    Scenario.SLOW_COMMUNICATION: 20.0,
    Scenario.DATALOADER_STALL: 0.5,
    Scenario.STAGE_IMBALANCE_LAYERS: 1.5,
    Scenario.SLOW_DP_GROUP: 4.0,
    Scenario.JOB_STALL: 0.3,
}

MAGNITUDE_MEANING: dict[Scenario, str] = {
    Scenario.NONE: "unused",
    Scenario.STAGE_IMBALANCE: "last-stage forward time ÷ a middle stage's forward time",
    Scenario.STAGE_IMBALANCE_FIRST: "first-stage forward time ÷ a middle stage's forward time",
    Scenario.SEQUENCE_LENGTH_IMBALANCE: "longest sequence length in K tokens (tail of the distribution)",
    Scenario.GC_PAUSE: "pause length in seconds (reached at the last step with gc_growing)",
    Scenario.FAULTY_MACHINE: "compute slowdown factor of the faulty worker(s)",
    Scenario.SLOW_COMMUNICATION: "transfer-time factor of the slow link or host",
    Scenario.DATALOADER_STALL: "idle seconds before a step's first forward on the data-loading stage",
    Scenario.STAGE_IMBALANCE_LAYERS: "heavy stage's layers ÷ a middle stage's (in layers_per_stage)",
    Scenario.SLOW_DP_GROUP: "transfer-time factor of one stage's DP collectives (a slow member)",
    Scenario.JOB_STALL: "seconds every worker stops at the same moment, in one step",
}


class ScenarioSpec(BaseModel):
    """One synthetic job: sizes, schedule, injected scenarios and the seed.

    ``magnitude`` applies to every listed scenario (``DEFAULT_MAGNITUDE`` when None). ``host``
    places ``faulty-machine`` / ``slow-communication`` on every traced GPU of that host;
    ``worker = (dp_rank, pp_rank)`` places them on one worker (random by seed when neither is set).
    ``onset_step`` (a step id) makes ``faulty-machine`` start there instead of at the first step;
    ``heavy_stage`` is the stage ``stage-imbalance-layers`` gives more layers (default: a middle
    one, the last with pp 2); ``stall_step`` the step of ``job-stall`` (default: a middle step).
    ``slow-dp-group`` slows the DP collectives of stage ``worker[1]`` (random when unset).
    """

    model_config = ConfigDict(extra="forbid")

    dp: int = Field(default=2, ge=1, le=4096)
    pp: int = Field(default=4, ge=1, le=256)
    tp: int = Field(default=1, ge=1)
    cp: int = Field(default=1, ge=1)
    vpp: int = Field(default=1, ge=1, le=64)
    microbatches: int = Field(default=8, ge=1, le=4096)
    steps: int = Field(default=4, ge=1, le=10000)
    first_step: int = Field(default=0, ge=0)
    schedule: Schedule = Schedule.ONE_F_ONE_B
    scenarios: list[Scenario] = Field(default_factory=lambda: [Scenario.NONE])
    magnitude: float | None = Field(default=None, gt=0)
    magnitudes: dict[Scenario, float] = Field(
        default_factory=dict, description="per-scenario magnitude overrides (two causes, two sizes)"
    )
    seed: int = 0
    host: int | None = Field(default=None, ge=0)
    worker: tuple[int, int] | None = None
    gc_growing: bool = False
    gpus_per_host: int = Field(default=DEFAULT_GPUS_PER_HOST, ge=1)
    layers_per_stage: list[int] | None = Field(
        default=None, description="override the partition (layers per PP stage); default by scenario"
    )
    onset_step: int | None = Field(default=None, ge=0, description="faulty-machine starts at this step id")
    heavy_stage: int | None = Field(default=None, ge=0, description="stage-imbalance-layers' heavy stage")
    stall_step: int | None = Field(default=None, ge=0, description="job-stall's step id")
    trial_name: str = "synthetic"

    @field_validator("scenarios", mode="before")
    @classmethod
    def _split_names(cls, value: object) -> object:
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        return value

    @model_validator(mode="after")
    def _check(self) -> ScenarioSpec:
        if not self.scenarios:
            raise ValueError("at least one scenario is needed ('none' for a healthy job)")
        if Scenario.NONE in self.scenarios and len(self.scenarios) > 1:
            raise ValueError("'none' cannot be combined with other scenarios")
        if len(set(self.scenarios)) != len(self.scenarios):
            raise ValueError("a scenario is listed twice")
        if self.schedule is Schedule.INTERLEAVED:
            if self.vpp < 2:
                raise ValueError("the interleaved schedule needs --vpp of at least 2")
            if self.pp < 2:
                raise ValueError("the interleaved schedule needs pp of at least 2")
            if self.microbatches % self.pp:
                raise ValueError(
                    f"the interleaved schedule needs microbatches ({self.microbatches}) "
                    f"divisible by pp ({self.pp})"
                )
        elif self.vpp != 1:
            raise ValueError(f"--vpp {self.vpp} needs --schedule interleaved")
        if self.layers_per_stage is not None and len(self.layers_per_stage) != self.pp:
            raise ValueError(f"layers_per_stage has {len(self.layers_per_stage)} entries, pp={self.pp}")
        if self.worker is not None and not (0 <= self.worker[0] < self.dp and 0 <= self.worker[1] < self.pp):
            raise ValueError(f"worker {self.worker} is outside dp={self.dp} x pp={self.pp}")
        if self.host is not None and self.host >= self.n_hosts:
            raise ValueError(f"host {self.host} does not exist (the job has {self.n_hosts} hosts)")
        wanted = set(self.scenarios)
        steps = range(self.first_step, self.first_step + self.steps)
        if self.onset_step is not None and self.onset_step not in steps:
            raise ValueError(
                f"onset_step {self.onset_step} is not one of the steps {steps.start}..{steps.stop - 1}"
            )
        if self.stall_step is not None and self.stall_step not in steps:
            raise ValueError(
                f"stall_step {self.stall_step} is not one of the steps {steps.start}..{steps.stop - 1}"
            )
        if self.heavy_stage is not None and self.heavy_stage >= self.pp:
            raise ValueError(f"heavy_stage {self.heavy_stage} is outside pp={self.pp}")
        if Scenario.STAGE_IMBALANCE_LAYERS in wanted and self.pp == 1:
            raise ValueError("stage-imbalance-layers needs pp > 1")
        if Scenario.SLOW_DP_GROUP in wanted and self.dp * self.cp == 1:
            raise ValueError("slow-dp-group needs dp > 1 (a DP group to slow)")
        if Scenario.SLOW_COMMUNICATION in wanted and self.pp == 1 and self.dp * self.cp == 1:
            raise ValueError("slow-communication needs pp > 1 or dp > 1 (nothing communicates)")
        if Scenario.STAGE_IMBALANCE_FIRST in wanted and Scenario.STAGE_IMBALANCE in wanted and self.pp == 1:
            raise ValueError("stage-imbalance and stage-imbalance-first need pp > 1 together")
        if (wanted & {Scenario.STAGE_IMBALANCE, Scenario.STAGE_IMBALANCE_FIRST}) and self.pp == 1:
            raise ValueError("stage-imbalance needs pp > 1")
        return self

    @property
    def world_size(self) -> int:
        return self.dp * self.pp * self.tp * self.cp

    @property
    def n_hosts(self) -> int:
        return -(-self.world_size // self.gpus_per_host)

    def magnitude_of(self, scenario: Scenario) -> float:
        if scenario in self.magnitudes:
            return self.magnitudes[scenario]
        return self.magnitude if self.magnitude is not None else DEFAULT_MAGNITUDE[scenario]

    def rank_of(self, dp_rank: int, pp_rank: int) -> int:
        """Global rank of the traced rank of worker (dp, pp): Megatron order TP, CP, DP, PP (slowest)."""
        return self.tp * self.cp * (dp_rank + self.dp * pp_rank)

    def host_of(self, dp_rank: int, pp_rank: int) -> int:
        return self.rank_of(dp_rank, pp_rank) // self.gpus_per_host

    def heavy_stage_of(self) -> int:
        """The stage ``stage-imbalance-layers`` makes heavy."""
        if self.heavy_stage is not None:
            return self.heavy_stage
        return self.pp // 2 if self.pp >= 3 else self.pp - 1

    def step_ids(self) -> list[int]:
        return list(range(self.first_step, self.first_step + self.steps))


def pattern_of(scenario: Scenario, spec: ScenarioSpec) -> Pattern:
    """The vocabulary pattern (spatial, temporal, resource) an injected scenario has in this spec."""
    placed = Spatial.ONE_HOST if spec.host is not None else Spatial.SINGLE_WORKER
    table: dict[Scenario, tuple[Spatial, Temporal, Resource]] = {
        Scenario.STAGE_IMBALANCE: (Spatial.ONE_STAGE, Temporal.PERSISTENT, Resource.COMPUTE),
        Scenario.STAGE_IMBALANCE_FIRST: (Spatial.ONE_STAGE, Temporal.PERSISTENT, Resource.COMPUTE),
        Scenario.SEQUENCE_LENGTH_IMBALANCE: (Spatial.RANDOM_DP, Temporal.PERSISTENT, Resource.COMPUTE),
        Scenario.GC_PAUSE: (
            Spatial.RANDOM_DP, Temporal.GROWING if spec.gc_growing else Temporal.SPORADIC, Resource.COMPUTE
        ),
        Scenario.FAULTY_MACHINE: (
            placed, Temporal.ONSET if spec.onset_step not in (None, spec.first_step) else Temporal.PERSISTENT,
            Resource.COMPUTE,
        ),
        Scenario.STAGE_IMBALANCE_LAYERS: (Spatial.ONE_STAGE, Temporal.PERSISTENT, Resource.COMPUTE),
        Scenario.SLOW_DP_GROUP: (Spatial.ONE_STAGE, Temporal.PERSISTENT, Resource.COMMUNICATION),
        Scenario.SLOW_COMMUNICATION: (placed, Temporal.PERSISTENT, Resource.COMMUNICATION),
        Scenario.DATALOADER_STALL: (Spatial.ONE_STAGE, Temporal.PERSISTENT, Resource.LAUNCH),
    }
    if scenario not in table:
        return Pattern(spatial=None, temporal=None, resource=None)
    sp, tm, rs = table[scenario]
    return Pattern(spatial=sp, temporal=tm, resource=rs)


class CauseLabel(BaseModel):
    """One injected cause: id, magnitude (meaning per scenario, see ``MAGNITUDE_MEANING``), location."""

    model_config = ConfigDict(extra="forbid")

    id: CauseId
    magnitude: float
    location: Location
    true_marginal: float | None = Field(
        default=None,
        description="the generator's own speedup if only this cause were removed: mean step time "
        "with every injected cause over that with all but this one (None when not run)",
    )
    # Not written to labels.json (excluded on dump): the scenario name and pattern, for scoring.
    # The generator's own slowdown with only this cause injected (same spec and seed otherwise), and
    # the job's slowdown over the same job without this cause: the cause's effect alone and its
    # marginal effect in a multi-cause job (both 1.0-based ratios of mean step times). In-process
    # only, like ``scenario``: labels.json keeps its documented shape.
    slowdown_alone: float | None = Field(default=None, exclude=True)
    marginal_slowdown: float | None = Field(default=None, exclude=True)
    scenario: Scenario = Field(default=Scenario.NONE, exclude=True)
    pattern: Pattern = Field(default_factory=Pattern, exclude=True)

    def signature(self) -> CauseSignature:
        """The label as a ``CauseSignature`` (what a diagnosis or an incident carries)."""
        return CauseSignature(cause=self.id, pattern=self.pattern, location=self.location, confidence=None)


class Labels(BaseModel):
    """Ground truth of a generated job: ``labels.json``."""

    model_config = ConfigDict(extra="forbid")

    causes: list[CauseLabel] = Field(default_factory=list)
    expected_straggling: bool = False
    # A job-wide stall (every worker stopped at once) is not a cause of the vocabulary: its steps.
    # In-process only (labels.json keeps its documented shape).
    job_stall_steps: list[int] = Field(default_factory=list, exclude=True)
