"""The what-if report: one pydantic model, the public JSON contract of ``straggler-lens analyze``.

Every consumer (detectors, remedies, heatmaps, MCP tools, REST) reads this model. Dict keys are
strings in JSON (steps, DP ranks, stages and op-type names all become string keys).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from diagnosers.fidelity import Fidelity as Fidelity
from diagnosers.fidelity import assess_fidelity as assess_fidelity
from diagnosers.model import JobMeta
from diagnosers.thresholds import measured_loss as measured_loss


class WorkerSlowdown(BaseModel):
    """Slowdown attributable to one worker (one DP rank x PP rank cell)."""

    model_config = ConfigDict(extra="forbid")

    dp_rank: int
    pp_rank: int
    ranks: list[int] = Field(description="global ranks traced for this worker")
    slowdown: float | None = Field(
        description="exact S_w: mean step time with only this worker's ops put back into the "
        "ideal run, over the ideal step time; None when exact runs were restricted to the top K"
    )
    slowdown_estimate: float = Field(
        description="the artifact's estimate min(S_dp(w), S_pp(w))"
    )


class Attribution(BaseModel):
    """Put-back attributions: start from the ideal run, restore one group's original durations."""

    model_config = ConfigDict(extra="forbid")

    by_optype: dict[str, float] = Field(
        default_factory=dict,
        description="S_t per op type; P2P types merged into forward-pp-comm / backward-pp-comm",
    )
    by_dp_rank: dict[str, float] = Field(default_factory=dict)
    by_stage: dict[str, float] = Field(default_factory=dict)
    by_optype_per_step: dict[str, dict[str, float]] = Field(default_factory=dict)
    by_dp_rank_per_step: dict[str, dict[str, float]] = Field(default_factory=dict)
    by_stage_per_step: dict[str, dict[str, float]] = Field(default_factory=dict)
    by_worker: list[WorkerSlowdown] = Field(default_factory=list)
    by_worker_exact_top_k: int | None = Field(
        None, description="when set, exact per-worker runs were restricted to the top K by estimate"
    )


class RatioMetric(BaseModel):
    """A "fix a subset" ratio (M_W / M_S): how much of the slowdown idealising a subset removes.

    ``rem = (T - T_rem) / (T - T_ideal)`` where ``T_rem`` idealises only the subset;
    ``add = (T_add - T_ideal) / (T - T_ideal)`` where ``T_add`` puts only the subset back.
    """

    model_config = ConfigDict(extra="forbid")

    value: float | None = Field(description="the metric (= rem); None when T == T_ideal")
    rem: float | None = None
    add: float | None = None
    t_rem: float
    t_add: float
    t_orig: float
    t_ideal: float
    workers: list[tuple[int, int]] = Field(
        default_factory=list, description="(dp_rank, pp_rank) of the idealised subset"
    )


class FixRatios(BaseModel):
    """The full records behind ``m_w``, ``m_s`` and ``m_s_by_stage`` (times and the subset fixed)."""

    model_config = ConfigDict(extra="forbid")

    m_w: RatioMetric | None = None
    m_s: RatioMetric | None = None
    by_stage: dict[str, RatioMetric] = Field(default_factory=dict)


class StepTimes(BaseModel):
    model_config = ConfigDict(extra="forbid")

    actual: dict[str, float] = Field(description="measured step time (trace), per step")
    no_delay: dict[str, float] = Field(description="simulated, original durations, launch delay 0")
    ideal: dict[str, float] = Field(description="simulated, every op at its typical duration")


class WhatIfReport(BaseModel):
    """The result of the what-if analysis of one trace (METHOD.md A4-A5).

    ``fidelity`` comes first, so a reader meets it before any number that depends on it. From
    ``analyze`` it judges the whole simulation error (no cause is known yet); inside a
    :class:`~diagnosers.diagnose.Diagnosis` it is the diagnosis's own, which discounts the launch
    gaps a found cause explains. A stored report without the field gets it from its
    ``simulation_error`` (and ``measured_loss_fraction`` from its step times) when read back.
    """

    model_config = ConfigDict(extra="forbid")

    fidelity: Fidelity = Field(description="how far the simulated job stands for the measured one")
    slowdown: float = Field(description="job slowdown S = mean T_s / mean T_ideal")
    straggling: bool = Field(description="S >= 1.1")
    decomposed: bool = Field(
        description="S >= 1.03; below it the artifact leaves attributions empty (we still compute them)"
    )
    step_slowdown: dict[str, float] = Field(description="T_s / T_ideal per step")
    launch_slowdown: float = Field(
        description="mean actual step time / mean no-delay simulated step time"
    )
    simulation_error: float = Field(description="launch_slowdown - 1")
    step_launch_gap: dict[str, float] = Field(
        default_factory=dict,
        description="per step: mean over workers of the gap before the worker's first op (s)",
    )
    attribution: Attribution
    m_w: float | None = Field(
        None,
        description="M_W: share of the slowdown removed by idealising the slowest 3% of workers "
        "(the artifact's `rem`); None when the job has no slowdown to remove",
    )
    m_s: float | None = Field(
        None,
        description="M_S: share of the slowdown removed by idealising the last PP stage (can exceed 1)",
    )
    m_s_by_stage: dict[str, float | None] = Field(
        default_factory=dict, description="the M_S ratio for every stage, keyed by PP rank"
    )
    fix_ratios: FixRatios = Field(
        default_factory=FixRatios,
        description="M_W / M_S with their step times (t_rem, t_add, t_orig, t_ideal) and subsets",
    )
    wasted_fraction: float = Field(description="1 - 1/S: share of GPU time lost to straggling")
    measured_loss_fraction: float = Field(
        default=0.0,
        description="1 - T_ideal / mean measured step time: share of the measured step time an ideal "
        "run without launch gaps would not spend (straggling plus launch gaps and stalls)",
    )
    step_times: StepTimes
    job: JobMeta
    n_ops: int
    steps: list[int]
    notes: list[str] = Field(default_factory=list, description="reader and engine notes")

    @model_validator(mode="before")
    @classmethod
    def _derived_fields(cls, data: Any) -> Any:
        # Reports stored before these fields existed: derive them the way analyze() does.
        if not isinstance(data, dict):
            return data
        if "fidelity" not in data and "simulation_error" in data:
            data = {**data, "fidelity": assess_fidelity(float(data["simulation_error"]))}
        if "measured_loss_fraction" not in data:
            st = data.get("step_times")
            st = st.model_dump() if isinstance(st, BaseModel) else st
            if isinstance(st, dict) and st.get("actual") and st.get("ideal"):
                data = {**data, "measured_loss_fraction": measured_loss(st["actual"], st["ideal"])}
        return data


class ScenarioResult(BaseModel):
    """One ad-hoc what-if run (``diagnosers.whatif.run_scenario``, the MCP ``run_whatif`` tool).

    Both runs have launch delay 0; ``speedup = t_orig / t_after`` over mean step times.
    """

    model_config = ConfigDict(extra="forbid")

    t_orig: float = Field(description="mean simulated step time with original durations (s)")
    t_after: float = Field(description="mean simulated step time with the selected ops changed (s)")
    speedup: float
    step_times_orig: dict[str, float] = Field(default_factory=dict)
    step_times_after: dict[str, float] = Field(default_factory=dict)
    n_ops_changed: int = Field(0, description="ops whose duration the scenario changed")
    free_comm: bool = Field(False, description="selected communication cost nothing (else: idealised)")
    selector: dict[str, list[int] | list[str] | None] = Field(
        default_factory=dict, description="optypes / dp_ranks / pp_ranks / steps; None = all"
    )
