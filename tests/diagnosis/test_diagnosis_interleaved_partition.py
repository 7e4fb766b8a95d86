"""The chunk-aware repartition remedy on interleaved jobs, against the generator's own truth.

The true gain of a plan is measured by the generator: the same job (same seeds, same noise) with
each chunk's compute set by the generator's cost model to the plan's layers — the heavy head's
size taken from the job's label — run through the generator's event loop.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import pytest

from diagnosers.diagnose import diagnose
from diagnosers.model import OPTYPE_CODE, JobMeta, Trace
from diagnosers.partition import best_chunk_partition, chunk_costs, gmc_layers
from diagnosers.synth import ScenarioSpec, Schedule, generate
from diagnosers.synth.cost import CostModel
from diagnosers.synth.executor import execute
from diagnosers.synth.schedule import build_programs

gen: Any = importlib.import_module("diagnosers.synth.generate")


def true_speedup(spec: ScenarioSpec, head_magnitude: float, plan: np.ndarray) -> float:
    """Generator step time of the job as generated ÷ with ``plan`` (layers per global chunk)."""
    cost = CostModel()
    pp, v, n, lf = spec.pp, spec.vpp, cost.layers_per_middle_stage, cost.layer_fwd
    programs = build_programs(pp, v, spec.microbatches, spec.schedule, spec.dp * spec.cp > 1)
    layers = gen._partition(spec, cost)
    seeds = np.random.SeedSequence(spec.seed).spawn(4)
    head = (head_magnitude - 1.0) * n * lf

    def extra(s: int, chunk: int, forward: bool) -> float:
        r = 1.0 if forward else cost.bwd_ratio
        e = cost.embedding_layers * lf * r if (s == 0 and chunk == 0) else 0.0
        if s == pp - 1 and chunk == v - 1:
            e += head if forward else head * cost.heavy_head_bwd_ratio
        return e

    def run(new: np.ndarray | None) -> float:
        arrays = gen._base_arrays(spec, cost, programs, layers, np.random.default_rng(seeds[0]))
        gen._inject(spec, cost, arrays, programs, np.random.default_rng(seeds[1]))
        if new is not None:
            for s, prog in enumerate(programs):
                old = gen._chunk_layers(layers, s, v, n)
                for i, c in enumerate(prog.computes):
                    r = 1.0 if c.forward else cost.bwd_ratio
                    e = extra(s, c.chunk, c.forward)
                    arrays.compute[s][i] *= (new[c.chunk * pp + s] * lf * r + e) / (old[c.chunk] * lf * r + e)
                stage_layers = float(sum(new[ch * pp + s] for ch in range(v)))
                arrays.local[s]["optimizer"] *= stage_layers / layers[s]
                for name in arrays.dp_time:
                    grads = name == "grads-reduce-scatter"
                    arrays.dp_time[name][s] = cost.dp_time(stage_layers, spec.dp * spec.cp, grads=grads)
        records = execute(programs, arrays, cost, spec.steps, spec.dp, np.random.default_rng(seeds[2]))
        return float(gen._mean_step_time(records))

    return run(None) / run(plan)


@pytest.mark.parametrize(
    ("dp", "pp", "vpp", "m", "seed"), [(4, 4, 2, 8, 1), (2, 8, 2, 16, 4), (4, 2, 3, 4, 3)]
)
def test_heavy_last_chunk_gain_is_predicted_within_10_percent(
    dp: int, pp: int, vpp: int, m: int, seed: int
) -> None:
    spec = ScenarioSpec(
        dp=dp, pp=pp, vpp=vpp, microbatches=m, steps=3, schedule=Schedule.INTERLEAVED,
        scenarios=["stage-imbalance"], seed=seed,
    )
    job = generate(spec)
    diag = diagnose(job.trace)
    rem = next(r for r in diag.remedies if r.cause_id == "stage-imbalance")
    plan = np.asarray(rem.details["layers_per_chunk_suggested"], dtype=np.float64)
    assert plan[-1] < np.asarray(rem.details["layers_per_chunk_now"])[-1]  # layers leave the head's chunk
    assert plan.sum() == pytest.approx(sum(job.trace.meta.layers_per_stage or []))
    truth = true_speedup(spec, job.labels.causes[0].magnitude, plan)
    assert truth > 1.03
    assert abs((rem.predicted_speedup - 1) - (truth - 1)) <= 0.1 * (truth - 1), (rem.predicted_speedup, truth)
    assert rem.details["layers_assumed"] == 0


def test_non_interleaved_jobs_keep_the_stage_plan() -> None:
    job = generate(ScenarioSpec(dp=2, pp=4, microbatches=8, steps=3, scenarios=["stage-imbalance"], seed=12))
    rem = next(r for r in diagnose(job.trace).remedies if r.cause_id == "stage-imbalance")
    assert "layers_per_chunk_suggested" not in rem.details


def test_unknown_layers_are_assumed_and_said() -> None:
    job = generate(ScenarioSpec(dp=2, pp=4, vpp=2, microbatches=8, steps=3, schedule=Schedule.INTERLEAVED,
                                scenarios=["stage-imbalance"], seed=1))
    meta = job.trace.meta.model_copy(update={"layers_per_stage": None, "layers_per_chunk": None})
    trace = Trace(ops=job.trace.ops, meta=meta)
    rem = next(r for r in diagnose(trace).remedies if r.cause_id == "stage-imbalance")
    assert rem.details["layers_assumed"] == 1
    assert "assumed 8 per stage" in rem.action


def test_search_moves_layers_off_a_heavy_chunk() -> None:
    # 4 stages x 2 chunks, 4 layers each; the last chunk carries a head worth 8 layers
    layers = gmc_layers([[4, 4]] * 4, 4, 2)
    g = np.arange(8)
    optype = np.repeat([OPTYPE_CODE["forward-compute"], OPTYPE_CODE["backward-compute"]], 8)
    gmc = np.concatenate([g, g])
    dur = np.concatenate([layers * 1.0, layers * 2.0])
    dur[7] += 8.0
    dur[15] += 8.0
    costs = chunk_costs(optype, gmc, dur, 4, 2, 8, layers)
    assert costs.c_f == pytest.approx(1.0) and costs.extra_f[7] == pytest.approx(8.0)
    plan = best_chunk_partition(costs)
    assert plan.sum() == layers.sum() and plan[7] == 0
    assert costs.proxy(plan) < costs.proxy(layers)
    with pytest.raises(ValueError, match="2 stages x 2 chunks"):
        gmc_layers([[1, 2, 3]], 2, 2)
    with pytest.raises(ValueError, match="layers_per_chunk must list"):
        JobMeta(pp=2, vpp=2, layers_per_chunk=[[1, 2]])
