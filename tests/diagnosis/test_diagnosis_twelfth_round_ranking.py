"""Ranking against the example job's standing last-stage load (docs/ACCURACY.md, "Ranking against
the standing load (twelfth round)"): two overlaps that credited the last stage's imbalance with
another cause's time in its marginal gain.

- A faulty machine on the stage: the stage's weight is read from its typical DP rank without the
  steps that machine is slow in (``marginal.machine_ops``); with DP 2 the median of the two ranks
  was their mean, half the machine's excess.
- A dataloader stall beside it: the other causes' runs keep the stall's idle gaps as launch
  delays (``marginal.launch_basis``, ``marginal.stall_delays``); with launch delay 0 fixing the
  stage also removed the stall."""

from __future__ import annotations

import numpy as np

from diagnosers.detectors import compute_stats
from diagnosers.detectors.base import CauseMatch, TraceStats
from diagnosers.detectors.stats import BWD, FWD
from diagnosers.diagnose import diagnose
from diagnosers.marginal import (
    GAIN_TIE_TOLERANCE,
    launch_basis,
    machine_ops,
    stage_at_peer_weight,
    stall_delays,
)
from diagnosers.synth import generate
from diagnosers.synth.spec import ScenarioSpec
from diagnosers.vocab import CauseId, Pattern, Resource, Spatial, Temporal
from diagnosers.whatif import build_engine
from tests._support.recorded import widened_folder, widened_trace


def _causes(part: str, name: str) -> list[CauseMatch]:
    return diagnose(widened_trace(widened_folder(part, name))).causes


def _machine(stats: TraceStats, cell: tuple[int, int], affected: list[int] | None) -> CauseMatch:
    """A faulty-machine match at ``cell`` (slow in the ``affected`` trace steps; None: all)."""
    evidence: dict[str, object] = {"hot_cells": [f"{cell[0]},{cell[1]}"]}
    if affected is not None:
        evidence["affected_steps"] = affected
    return CauseMatch(
        id=CauseId.FAULTY_MACHINE, confidence=0.5, location=stats.location([cell]),
        pattern=Pattern(
            spatial=Spatial.SINGLE_WORKER, temporal=Temporal.PERSISTENT, resource=Resource.COMPUTE
        ),
        evidence=evidence,  # type: ignore[arg-type]
        summary="a slow worker",
    )


def test_a_slow_machine_on_the_last_stage_is_ranked_before_the_stage_it_sits_on() -> None:
    # heldout9 slow-rank-last-3x2: 10 ms on rank 4 (dp 1, last stage, DP 3). Read with rank 4
    # among the stage's three DP ranks, balancing the stage gained 1.171 (rank 4's machine 1.169,
    # a tie that the stage's confidence won); without rank 4's steps the stage gains 1.123
    causes = _causes("heldout9", "slow-rank-last-3x2")
    assert [(c.id, c.location.ranks) for c in causes] == [
        (CauseId.FAULTY_MACHINE, [4]), (CauseId.STAGE_IMBALANCE, [3, 4, 5])
    ]
    machine, stage = causes
    assert machine.marginal_gain is not None and stage.marginal_gain is not None
    assert machine.marginal_gain > stage.marginal_gain * 1.03
    assert "without the slow steps of the faulty machine" in (stage.marginal_basis or "")


def test_an_onset_machine_leaves_its_normal_steps_to_show_the_stage() -> None:
    # heldout5 layers-2x4 (layers 1,2,1,1; nothing else injected): rank 2 on the heavier stage is
    # slow in steps 4 and 5 only (an onset, compute 2.8x its peer's there). Its first two steps
    # still show the stage's weight, so the partition's imbalance stays first (1.211 against the
    # machine's 1.171); leaving all of rank 2 out would read the stage from its one peer (1.126)
    causes = _causes("heldout5", "layers-2x4")
    assert [(c.id, c.location.ranks) for c in causes] == [
        (CauseId.STAGE_IMBALANCE, [2, 3]), (CauseId.FAULTY_MACHINE, [2])
    ]
    assert causes[1].pattern.temporal is Temporal.ONSET


def test_the_stage_weight_is_its_peer_dp_ranks_without_the_machine() -> None:
    # the same recording's statistics: with rank 4 (dp 1) left out, stage 1's remaining DP ranks
    # average exactly the other stage's weight per pass after the balance; the machine keeps its
    # own excess over them
    trace = widened_trace(widened_folder("heldout9", "slow-rank-last-3x2"))
    stats = compute_stats(trace, build_engine(trace))
    assert stats.probe is not None
    orig = stats.probe.original
    persistent = machine_ops(stats, [_machine(stats, (1, 1), None)])
    assert persistent.sum() == ((stats.op_dp == 1) & (stats.op_pp == 1)).sum()
    onset = machine_ops(stats, [_machine(stats, (1, 1), [int(stats.steps[-1])])])
    assert 0 < onset.sum() < persistent.sum()
    fixed = stage_at_peer_weight(stats, stats.probe, 1, persistent)
    assert fixed is not None
    for code in (FWD, BWD):
        of_type = stats.optype == code
        other = float(orig[of_type & (stats.op_pp == 0)].mean())
        peers = [float(fixed[of_type & (stats.op_pp == 1) & (stats.op_dp == d)].mean()) for d in (0, 2)]
        assert np.isclose(np.median(peers), other)
        slow = of_type & (stats.op_pp == 1) & (stats.op_dp == 1)
        assert float(fixed[slow].mean()) > 1.2 * other
    # without the machine the median of the three DP ranks (rank 4 among them) sets the weight
    plain = stage_at_peer_weight(stats, stats.probe, 1)
    assert plain is not None and not np.allclose(plain, fixed)


def test_beside_an_input_stall_the_stage_is_fixed_with_the_stall_left_in() -> None:
    # heldout3 dataloader-stall-3x2: rank 1's data loading sleeps (105 ms per step) beside the last
    # stage's standing load. With launch delay 0 balancing the stage gained 1.297, against the
    # stall's 1.247 measured on the measured step time: the stall's time was in the stage's gain.
    # With the stall's idle gaps kept in both runs the stage gains 1.252, a tie (within 1%) that
    # the stall's confidence wins
    causes = _causes("heldout3", "dataloader-stall-3x2")
    assert [(c.id, c.location.ranks) for c in causes] == [
        (CauseId.DATALOADER_STALL, [1]), (CauseId.STAGE_IMBALANCE, [3, 4, 5])
    ]
    stall, stage = causes
    assert stage.marginal_gain is not None and stall.marginal_gain is not None
    assert stage.marginal_gain < 1.27 and stage.marginal_gain < stall.marginal_gain * (1 + GAIN_TIE_TOLERANCE)
    assert "the input stall's idle gaps kept" in (stage.marginal_basis or "")
    assert launch_basis(causes) and not launch_basis(causes[:1]) and not launch_basis(causes[1:])


def test_the_stall_kept_gives_the_generators_true_marginal() -> None:
    # a generated 4x4 job with a heavier last stage and an input stall, whose labels carry each
    # cause's true marginal (the job regenerated without it, the other kept): stage 1.332, stall
    # 1.179. With launch delay 0 the stage's run gave 1.419 (the stall's time in it); with every
    # measured launch delay kept, 1.067 (the waits the stage made replayed); with the stall's own
    # idle gaps kept, 1.330
    job = generate(ScenarioSpec(
        dp=4, pp=4, microbatches=8, steps=4, seed=5, scenarios=["stage-imbalance", "dataloader-stall"]
    ))
    truth = {c.id: c.true_marginal for c in job.labels.causes}
    d = diagnose(job.trace)
    assert [c.id for c in d.causes] == [CauseId.STAGE_IMBALANCE, CauseId.DATALOADER_STALL]
    stage = d.causes[0]
    assert stage.marginal_gain is not None and truth[CauseId.STAGE_IMBALANCE] is not None
    assert abs(stage.marginal_gain / truth[CauseId.STAGE_IMBALANCE] - 1.0) < 0.01
    trace = job.trace
    stats = compute_stats(trace, build_engine(trace))
    assert stats.probe is not None
    kept = stall_delays(stats, d.causes)
    # one delay per stalled worker-step, on its first forward, equal to the measured idle gap
    stalled = {(dd, p) for dd in range(stats.dp) for p in range(stats.pp)
               if int(stats.rank_of[dd, p]) in set(d.causes[1].location.ranks)}
    assert np.count_nonzero(kept) <= len(stalled) * stats.n_steps
    assert np.isclose(kept.sum(), sum(stats.launch_idle[:, dd, p].sum() for dd, p in stalled))
    assert set(stats.optype[kept > 0].tolist()) == {FWD}
