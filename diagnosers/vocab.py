"""The shared vocabulary: cause ids, pattern enums and the ``Location`` model.

This is the one place the vocabulary lives. Detectors, remedies, the synthetic generator's labels
and the incident library's signatures all import it, so a diagnosis can be compared with a label or
with a past incident field by field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from diagnosers.plainmodel import PlainModel, pydantic_checked, validating

# The method's thresholds and the fidelity verdict live in a module without pydantic, so the
# analyze path can read them without importing it; they are part of the vocabulary all the same.
from diagnosers.thresholds import (  # noqa: F401  (re-exported)
    DECOMPOSE_THRESHOLD,
    DEFAULT_GPUS_PER_HOST,
    FIDELITY_GOOD_MAX,
    FIDELITY_UNRELIABLE_ABOVE,
    STRAGGLING_THRESHOLD,
    FidelityVerdict,
)


class CauseId(StrEnum):
    """Known root causes of straggling (METHOD.md A6 plus causes seen in public incidents)."""

    STAGE_IMBALANCE = "stage-imbalance"
    SEQUENCE_LENGTH_IMBALANCE = "sequence-length-imbalance"
    GC_PAUSE = "gc-pause"
    FAULTY_MACHINE = "faulty-machine"
    SLOW_COMMUNICATION = "slow-communication"
    DATALOADER_STALL = "dataloader-stall"
    CUDA_FALSE_DEPENDENCY = "cuda-false-dependency"
    MEMORY_FRAGMENTATION = "memory-fragmentation"
    MOE_LOAD_IMBALANCE = "moe-load-imbalance"
    NONE = "none"


CAUSE_DESCRIPTIONS: dict[CauseId, str] = {
    CauseId.STAGE_IMBALANCE: "A pipeline stage carries more work than the others (typically the last "
    "stage with the loss/logits layer, or the first with the embedding), so every step waits for it.",
    CauseId.SEQUENCE_LENGTH_IMBALANCE: "Variable-length sequences make some microbatches or DP ranks far "
    "costlier than others (attention is quadratic in length); the slow DP rank moves from step to step.",
    CauseId.GC_PAUSE: "Python's automatic garbage collector stops a training process for hundreds of "
    "milliseconds at random moments; ranks collect in different steps and wait for each other.",
    CauseId.FAULTY_MACHINE: "One GPU or host is persistently slow (hardware fault, throttling, a noisy "
    "neighbour), so every collective and pipeline transfer waits for it.",
    CauseId.SLOW_COMMUNICATION: "Transfers on a link or a communication group are slow while compute is "
    "normal (bad NIC, congestion, mis-routed traffic).",
    CauseId.DATALOADER_STALL: "The input pipeline or host-side work delays the start of steps; op "
    "durations are normal but the GPU idles between them.",
    CauseId.CUDA_FALSE_DEPENDENCY: "Kernels on independent streams serialise behind a communication "
    "kernel because they share CUDA hardware queues.",
    CauseId.MEMORY_FRAGMENTATION: "The CUDA caching allocator fragments and stalls on frees and "
    "re-allocations, slowing steps irregularly.",
    CauseId.MOE_LOAD_IMBALANCE: "Mixture-of-experts routing sends more tokens to some experts, so the "
    "ranks that host them compute longer.",
    CauseId.NONE: "No straggler: the job runs at its ideal speed within noise.",
}


class Spatial(StrEnum):
    """Where a slowdown sits in the DP x PP grid."""

    SINGLE_WORKER = "single-worker"
    ONE_HOST = "one-host"
    ONE_STAGE = "one-stage"
    RANDOM_DP = "random-dp"
    JOB_WIDE = "job-wide"


class Temporal(StrEnum):
    """How a slowdown behaves over the traced steps."""

    PERSISTENT = "persistent"
    SPORADIC = "sporadic"
    GROWING = "growing"
    # absent at the start of the traced window, then present from one step on (a host that starts
    # throttling, a link that degrades mid-run); ``Pattern.onset_step`` names that step
    ONSET = "onset"


class Resource(StrEnum):
    """Which kind of time a slowdown lives in."""

    COMPUTE = "compute"
    COMMUNICATION = "communication"
    LAUNCH = "launch"


@dataclass
class Pattern(PlainModel):
    """A cause's shape in the vocabulary's terms; any field may be unknown.

    ``onset_step`` is the first step id at which a cause with ``temporal == onset`` is present (a
    cause that starts inside the profiling window). It stays ``None`` for the other temporal
    patterns, and may be ``None`` for an onset whose step is unknown (an incident report that only
    says "from some point on").
    """

    __pydantic_config__: ClassVar[dict[str, Any]] = {"extra": "forbid"}

    spatial: Spatial | None = None
    temporal: Temporal | None = None
    resource: Resource | None = None
    onset_step: int | None = field(default=None, metadata={"ge": 0})

    def __post_init__(self) -> None:
        onset_ok = self.onset_step is None or self.temporal == Temporal.ONSET
        if validating():  # pydantic built it: its ValueError becomes pydantic's ValidationError
            if not onset_ok:
                shown = self.temporal.value if self.temporal else None
                raise ValueError(f"onset_step {self.onset_step} is given but temporal is {shown!r}; "
                                 "an onset step belongs to temporal 'onset'")
            return
        plain = (
            (self.spatial is None or type(self.spatial) is Spatial)
            and (self.temporal is None or type(self.temporal) is Temporal)
            and (self.resource is None or type(self.resource) is Resource)
            and (self.onset_step is None or (type(self.onset_step) is int and self.onset_step >= 0))
        )
        if not (plain and onset_ok):
            pydantic_checked(self)


@dataclass
class Location(PlainModel):
    """Where a cause acts. Every list names the affected members explicitly.

    - ``dp_ranks`` / ``pp_ranks``: the DP and PP coordinates involved (a hot PP row lists all its DP
      ranks too);
    - ``ranks``: the trace's global ranks (one traced rank per TP/CP group);
    - ``hosts``: ``rank // gpus_per_host`` of those ranks;
    - ``steps``: the affected step ids (a persistent cause lists every traced step).

    An empty list means "not applicable / unknown", never "none affected".
    """

    __pydantic_config__: ClassVar[dict[str, Any]] = {"extra": "forbid"}

    dp_ranks: list[int] = field(default_factory=list)
    pp_ranks: list[int] = field(default_factory=list)
    ranks: list[int] = field(default_factory=list)
    hosts: list[int] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if validating():
            return
        for values in (self.dp_ranks, self.pp_ranks, self.ranks, self.hosts, self.steps):
            if type(values) is not list or not all(type(v) is int for v in values):
                pydantic_checked(self)
                return


# Broad incident categories of the fact sheet (research/incident_facts.jsonl) mapped to cause ids.
# A category maps to zero or more causes; the incident library keeps the category as is.
CATEGORY_TO_CAUSES: dict[str, tuple[CauseId, ...]] = {
    "pipeline-stage-imbalance": (CauseId.STAGE_IMBALANCE,),
    "sequence-length-imbalance": (CauseId.SEQUENCE_LENGTH_IMBALANCE,),
    "gc-pause": (CauseId.GC_PAUSE,),
    "faulty-hardware-gpu": (CauseId.FAULTY_MACHINE,),
    "faulty-hardware-nic-network": (CauseId.SLOW_COMMUNICATION,),
    "network-congestion": (CauseId.SLOW_COMMUNICATION,),
    "storage-or-dataloader": (CauseId.DATALOADER_STALL,),
    "kernel-false-dependency": (CauseId.CUDA_FALSE_DEPENDENCY,),
    "cuda-memory-fragmentation": (CauseId.MEMORY_FRAGMENTATION,),
    "moe-load-imbalance": (CauseId.MOE_LOAD_IMBALANCE,),
    "thermal-or-power-throttling": (CauseId.FAULTY_MACHINE,),
    "host-cpu-contention": (CauseId.FAULTY_MACHINE,),
    "checkpointing-stall": (),
    "software-bug-or-config": (),
    "other": (),
}

# Which incident categories a detected cause corresponds to (the inverse view, for detectors).
CAUSE_TO_CATEGORIES: dict[CauseId, tuple[str, ...]] = {
    cause: tuple(cat for cat, causes in CATEGORY_TO_CAUSES.items() if cause in causes)
    for cause in CauseId
}

# A stall's idle time counts as explained only when the stall is seen in at least this many traced
# steps: an idle gap before the first op of a single traced step cannot be told from lag carried
# over from before the profiling window (ranks that enter the step late for a reason no traced op
# shows), so with one step the gap stays unexplained and the verdict says so.
MIN_STALL_STEPS_EXPLAINED = 2
# When the fidelity is unreliable every cause's confidence is multiplied by
# min(UNRELIABLE_CONFIDENCE_FACTOR, 1 / (1 + unexplained error)): the evidence comes from a
# simulated job that covers only 1 / (1 + u) of the measured step, and halving at least keeps even
# a perfect match (0.99) below the 0.5 that reads as "more likely than not".
UNRELIABLE_CONFIDENCE_FACTOR = 0.5
# A drain (take a host out of the job) is proposed only for hosts that hold at most this share of
# the job's traced ranks: draining a host that carries the whole job, or a large part of it, is a
# restart of the job elsewhere, not the removal of one bad machine, and the evidence that one
# machine is at fault weakens as the machine's share of the job grows. host_cluster() in the
# detectors uses the same quarter for a fault that is local.
DRAIN_MAX_JOB_SHARE = 0.25
