"""The report contract people act on: fidelity, marginal-gain ranking, headline loss, safe remedies."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from diagnosers.diagnose import Diagnosis, diagnose
from diagnosers.heatmap import job_heatmap
from diagnosers.marginal import GAIN_TIE_TOLERANCE
from diagnosers.readers import load_trace
from diagnosers.render.text import render_diagnosis
from diagnosers.report import WhatIfReport, assess_fidelity
from diagnosers.synth.generate import generate
from diagnosers.synth.spec import ScenarioSpec
from diagnosers.vocab import FIDELITY_UNRELIABLE_ABOVE, CauseId

DLRM = Path("/work/shared/data/kineto/param-dlrm-8rank")


def _assert_unreliable_everywhere(d: Diagnosis) -> None:
    assert d.fidelity.verdict == "unreliable" and d.fidelity.unexplained_error > FIDELITY_UNRELIABLE_ABOVE
    assert d.summary.startswith("UNRELIABLE")
    assert render_diagnosis(d).startswith("UNRELIABLE")
    doc = json.loads(d.model_dump_json())
    assert next(iter(doc)) == "fidelity" and doc["fidelity"]["verdict"] == "unreliable"
    assert doc["report"]["fidelity"]["verdict"] == "unreliable"
    assert d.heatmap is not None and d.heatmap.title.startswith("UNRELIABLE")
    assert job_heatmap(d.report).title.startswith("UNRELIABLE")  # the PNG's title
    assert not any(r.destructive for r in d.remedies)
    assert not any("Drain" in r.action for r in d.remedies)
    for c in d.causes:
        before = c.evidence["confidence_before_fidelity"]
        assert isinstance(before, float) and c.confidence < before


@pytest.mark.skipif(not DLRM.exists(), reason="public DLRM traces not present")
def test_dlrm_traces_are_unreliable_and_never_drained() -> None:
    d = diagnose(load_trace([str(DLRM)]))
    # about 1,160% with the phase model, 54.5% with the kernel-level one: the rest is the ranks'
    # lag into the single traced step, which no traced op (and no stall seen twice) explains
    assert d.report.simulation_error > 0.05
    _assert_unreliable_everywhere(d)
    # host 0 holds all eight ranks: the remedy names GPUs, and says timing cannot tell
    fm = [r for r in d.remedies if r.cause_id == CauseId.FAULTY_MACHINE]
    for r in fm:
        assert "GPU" in r.action and r.details.get("machine_vs_job") == "indistinguishable"


def _with_unexplained_gap(job_spec: ScenarioSpec, gap_s: float) -> Diagnosis:
    job = generate(job_spec)
    ops = job.trace.ops
    # every op that starts in the second half of its step starts later: time inside the step that
    # no cause explains (not an idle gap before the first forward, which a stall would be)
    steps = np.unique(ops.step)
    half = {int(s): 0.5 * float(ops.start_ts[ops.step == s].max()) for s in steps}
    late = ops.start_ts > np.array([half[int(s)] for s in ops.step])
    ops.start_ts[late] += gap_s
    return diagnose(job.trace)


def test_injected_unexplained_gap_is_unreliable_with_no_drain() -> None:
    spec = ScenarioSpec(dp=4, pp=2, steps=4, scenarios=["faulty-machine"], gpus_per_host=1, seed=3)
    clean = diagnose(generate(spec).trace)
    assert clean.fidelity.verdict == "good"
    drains = [r for r in clean.remedies if r.destructive]
    assert drains and drains[0].action.startswith("Drain host")  # one host of eight: drainable
    d = _with_unexplained_gap(spec, 0.3)
    _assert_unreliable_everywhere(d)


def test_dataloader_stall_is_explained_and_its_cost_headlined() -> None:
    d = diagnose(generate(ScenarioSpec(dp=2, pp=4, steps=4, scenarios=["dataloader-stall"], seed=0)).trace)
    assert d.fidelity.verdict in ("good", "degraded")
    assert d.fidelity.explained_by == ["dataloader-stall"] and d.fidelity.simulation_error > 0.2
    assert d.headline_loss is not None and d.headline_loss.kind == "measured"
    assert d.report.wasted_fraction == pytest.approx(1 - 1 / d.report.slowdown)  # the study's, kept
    assert d.headline_loss.fraction == pytest.approx(d.report.measured_loss_fraction)
    assert f"{d.headline_loss.fraction * 100:.1f}% of the measured step time" in d.summary
    assert "The input stall costs" in d.summary


def test_fidelity_thresholds_and_old_reports() -> None:
    assert assess_fidelity(0.01).verdict == "good"
    assert assess_fidelity(0.04).verdict == "degraded"
    assert assess_fidelity(0.06).verdict == "unreliable"
    assert assess_fidelity(-0.08).verdict == "unreliable"  # the model overshooting counts too
    f = assess_fidelity(0.5, 0.48, ["dataloader-stall"])
    assert f.verdict == "good" and f.unexplained_error == pytest.approx(0.02)
    assert assess_fidelity(0.1, 0.5, ["x"]).unexplained_error == 0.0  # explained capped at the error


def test_stored_report_without_new_fields_still_loads(st_expected_report: WhatIfReport) -> None:
    st_report = st_expected_report
    doc = json.loads(st_report.model_dump_json())
    doc.pop("fidelity")
    doc.pop("measured_loss_fraction")
    back = WhatIfReport.model_validate(doc)
    assert back.fidelity == assess_fidelity(st_report.simulation_error)
    assert back.measured_loss_fraction == pytest.approx(st_report.measured_loss_fraction)


# Two causes that overlap: a slow worker on the heavy last stage. Tuning set (fixed before tuning
# the marginal runs): seeds 0-2, dp=4 x pp=4, the magnitude grid below; held-out figures are in
# docs/ACCURACY.md.
STAGE_MAGNITUDES = (1.3, 1.6, 2.0, 2.6)
WORKER_MAGNITUDES = (1.15, 1.3, 1.6, 2.0, 3.0)


def test_larger_true_marginal_cause_is_ranked_first() -> None:
    hits, n = 0, 0
    for seed, sm, wm in itertools.product((0, 1, 2), STAGE_MAGNITUDES, WORKER_MAGNITUDES):
        spec = ScenarioSpec(
            dp=4, pp=4, steps=4, scenarios=["stage-imbalance", "faulty-machine"], seed=seed,
            magnitudes={"stage-imbalance": sm, "faulty-machine": wm}, worker=(seed % 4, 3),
        )
        job = generate(spec)
        truth = {c.id: c.true_marginal for c in job.labels.causes}
        assert all(v is not None and v >= 1.0 for v in truth.values())
        d = diagnose(job.trace)
        assert all(c.marginal_gain is not None for c in d.causes)
        gains = [c.marginal_gain or 0.0 for c in d.causes]
        # ranked by gain; gains within GAIN_TIE_TOLERANCE of each other are a tie (confidence decides)
        assert all(a * (1 + GAIN_TIE_TOLERANCE) >= b for a, b in itertools.pairwise(gains)), gains
        best = max(truth, key=lambda k: truth[k] or 0.0)
        n += 1
        hits += bool(d.causes) and d.causes[0].id is best
        if d.causes:
            assert d.causes[0].id.value in d.summary.split("Largest gain:")[1].split(".")[0]
    assert hits / n >= 0.95, f"{hits}/{n}"


def test_stored_diagnosis_without_new_fields_still_loads() -> None:
    d = diagnose(generate(ScenarioSpec(dp=2, pp=2, steps=3, scenarios=["faulty-machine"], seed=1)).trace)
    doc = json.loads(d.model_dump_json())
    for key in ("fidelity", "headline_loss"):
        doc.pop(key)
    doc["report"].pop("fidelity")
    for c in doc["causes"]:
        c.pop("marginal_gain")
        c.pop("marginal_basis")
    for r in doc["remedies"]:
        r.pop("destructive")
    back = Diagnosis.model_validate(doc)
    assert back.fidelity == assess_fidelity(d.report.simulation_error)
    assert [c.id for c in back.causes] == [c.id for c in d.causes]
