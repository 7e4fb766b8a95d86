"""Diagnoses of generated jobs: healthy and noisy jobs, mixed causes, similar incidents, remedies."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from diagnosers.diagnose import diagnose
from diagnosers.remedies import best_partition
from diagnosers.signature import CauseSignature
from diagnosers.synth import CostModel, ScenarioSpec, generate
from diagnosers.vocab import CauseId


def test_healthy_job_has_no_cause_and_says_so() -> None:
    d = diagnose(generate(ScenarioSpec(dp=4, pp=4, microbatches=8, steps=4, seed=3)).trace)
    assert d.causes == [] and d.remedies == []
    assert d.summary.startswith("No straggler found")
    assert d.heatmap is not None and d.heatmap.matrix().max() < 1.1


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_uniform_noise_is_never_called_a_faulty_machine(seed: int) -> None:
    noisy = CostModel(op_sigma=0.08, worker_sigma=0.02, tail_prob=0.02, tail_scale=0.4, hiccup_prob=0.02)
    job = generate(ScenarioSpec(dp=8, pp=4, microbatches=8, steps=4, seed=seed), noisy)
    d = diagnose(job.trace)
    assert CauseId.FAULTY_MACHINE not in [c.id for c in d.causes]


def test_two_causes_are_both_reported_and_ranked() -> None:
    job = generate(
        ScenarioSpec(
            dp=4, pp=4, microbatches=8, steps=4, seed=5, scenarios=["stage-imbalance", "dataloader-stall"]
        )
    )
    d = diagnose(job.trace)
    ids = [c.id for c in d.causes]
    assert CauseId.STAGE_IMBALANCE in ids and CauseId.DATALOADER_STALL in ids
    assert [c.confidence for c in d.causes] == sorted((c.confidence for c in d.causes), reverse=True)
    assert {r.cause_id for r in d.remedies} >= {"stage-imbalance", "dataloader-stall"}
    assert "Also:" in d.summary


def test_similar_callable_receives_signatures_and_results_are_kept() -> None:
    seen: dict[str, Any] = {}

    def similar(*, signatures: list[CauseSignature], limit: int) -> list[dict[str, Any]]:
        seen["sigs"], seen["limit"] = signatures, limit
        return [{"id": "IL-0001", "title": "slow GPU", "score": 71.5, "reasons": ["same cause"]}]

    job = generate(ScenarioSpec(dp=4, pp=4, microbatches=8, steps=3, seed=6, scenarios=["faulty-machine"]))
    d = diagnose(job.trace, similar=similar)
    assert seen["sigs"][0].cause is CauseId.FAULTY_MACHINE and seen["limit"] == 5
    assert d.similar_incidents[0].id == "IL-0001" and d.similar_incidents[0].reasons == ["same cause"]


def test_a_failing_similar_search_becomes_a_note() -> None:
    def broken(**_: Any) -> list[Any]:
        raise RuntimeError("library offline")

    job = generate(ScenarioSpec(dp=2, pp=4, microbatches=8, steps=3, seed=7, scenarios=["stage-imbalance"]))
    d = diagnose(job.trace, similar=broken)
    assert d.causes and d.similar_incidents == []
    assert any("library offline" in n for n in d.notes)


def test_the_incident_library_plugs_in() -> None:
    # Through the CLI's own lookup, as users get it.
    from server.cli.commands.diagnose import similar_function

    similar = similar_function()
    job = generate(ScenarioSpec(dp=4, pp=4, microbatches=8, steps=3, seed=8, scenarios=["gc-pause"]))
    d = diagnose(job.trace, similar=similar)
    assert d.similar_incidents and all(s.id and s.title for s in d.similar_incidents)


def test_progress_is_reported_in_order() -> None:
    seen: list[float] = []
    job = generate(ScenarioSpec(dp=2, pp=2, microbatches=4, steps=2, seed=9))
    diagnose(job.trace, progress=lambda f, _msg: seen.append(f))
    assert seen == sorted(seen) and seen[-1] == 1.0


@pytest.mark.parametrize(
    ("total", "c", "extra"),
    [(36, 0.1, [0.0, 0.0, 0.0, 0.53]), (16, 0.5, [0.2, 0.0, 0.0, 2.0]), (12, 1.0, [0.0, 3.0, 0.0])],
)
def test_best_partition_matches_brute_force(total: int, c: float, extra: list[float]) -> None:
    e = np.asarray(extra)
    got = best_partition(total, c, e)
    assert sum(got) == total and min(got) >= 1
    best = min(
        max(n * c + x for n, x in zip(parts, e, strict=True))
        for parts in itertools.product(range(1, total + 1), repeat=len(e))
        if sum(parts) == total
    )
    assert max(n * c + x for n, x in zip(got, e, strict=True)) == pytest.approx(best)


def test_gc_remedy_suggests_n_from_the_pause_rate() -> None:
    job = generate(ScenarioSpec(dp=4, pp=4, microbatches=8, steps=6, seed=10, scenarios=["gc-pause"]))
    d = diagnose(job.trace)
    rem = next(r for r in d.remedies if r.cause_id == "gc-pause")
    rate = float(rem.details["pauses_per_worker_step"])  # type: ignore[arg-type]
    assert rem.details["suggested_n"] == max(1, round(1 / rate))
    assert rem.predicted_speedup > 1.0 and "every N =" in rem.action
