"""The three real traces of the study's artifact: each one's known cause must be the top cause."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from diagnosers.diagnose import Diagnosis
from diagnosers.heatmap import job_heatmap
from diagnosers.render.png import render_png
from diagnosers.vocab import CauseId, Spatial


@pytest.fixture
def st(artifact_diagnosis: Callable[[str], Diagnosis]) -> Diagnosis:
    return artifact_diagnosis("ST")


@pytest.fixture
def ar(artifact_diagnosis: Callable[[str], Diagnosis]) -> Diagnosis:
    return artifact_diagnosis("AR")


@pytest.fixture
def se(artifact_diagnosis: Callable[[str], Diagnosis]) -> Diagnosis:
    return artifact_diagnosis("SE")


def test_st_top_cause_is_stage_imbalance_at_the_last_stage(st: Diagnosis) -> None:
    top = st.causes[0]
    assert top.id is CauseId.STAGE_IMBALANCE
    assert top.location.pp_ranks == [3]
    assert top.location.dp_ranks == [0, 1]  # the whole row, named explicitly
    assert top.location.ranks == [6, 7]
    assert top.location.steps == st.report.steps
    assert top.pattern.spatial is Spatial.ONE_STAGE
    # METHOD.md A6: stage-3 forward 2.08x and backward 1.42x the other stages; M_S 1.219.
    assert top.evidence["fwd_ratio_vs_other_stages"] == pytest.approx(2.08, abs=0.02)
    assert top.evidence["bwd_ratio_vs_other_stages"] == pytest.approx(1.42, abs=0.02)
    assert top.evidence["m_s"] == pytest.approx(1.219, abs=0.01)
    assert [c.id for c in st.causes] == [CauseId.STAGE_IMBALANCE]


def test_st_repartition_remedy_moves_layers_off_the_last_stage(st: Diagnosis) -> None:
    rem = next(r for r in st.remedies if r.cause_id == CauseId.STAGE_IMBALANCE)
    assert rem.details["layers_now"] == [9, 9, 9, 9]
    new = rem.details["layers_suggested"]
    assert isinstance(new, list) and sum(new) == 36 and new[3] < 9
    assert rem.details["layers_assumed"] == 0
    # A real gain, bounded by the slowdown itself.
    assert 1.05 < rem.predicted_speedup <= st.slowdown + 1e-6


def test_ar_top_cause_is_a_faulty_machine_at_dp0_pp0(ar: Diagnosis) -> None:
    top = ar.causes[0]
    assert top.id is CauseId.FAULTY_MACHINE
    assert top.location.dp_ranks == [0] and top.location.pp_ranks == [0]
    assert top.location.ranks == [0] and top.location.hosts == [0]
    assert top.pattern.spatial is Spatial.SINGLE_WORKER
    assert top.evidence["persistent_step_fraction"] == 1.0
    assert float(top.evidence["fix_share"]) > 0.9  # type: ignore[arg-type]
    drain = next(r for r in ar.remedies if r.cause_id == CauseId.FAULTY_MACHINE)
    assert drain.predicted_speedup == pytest.approx(ar.slowdown, rel=0.05)


def test_se_top_cause_is_sequence_length_imbalance(se: Diagnosis) -> None:
    top = se.causes[0]
    assert top.id is CauseId.SEQUENCE_LENGTH_IMBALANCE
    assert top.location.dp_ranks == list(range(32))
    assert float(top.evidence["fwd_bwd_correlation"]) > 0.9  # type: ignore[arg-type]
    assert int(top.evidence["distinct_slowest_dp_ranks"]) > 10  # type: ignore[call-overload]
    assert CauseId.FAULTY_MACHINE not in [c.id for c in se.causes]
    rem = next(r for r in se.remedies if r.cause_id == CauseId.SEQUENCE_LENGTH_IMBALANCE)
    assert rem.predicted_speedup > 1.1


def test_st_heatmap_last_row_holds_the_maximum_and_renders(st: Diagnosis, tmp_path) -> None:
    for variant in ("exact", "estimate"):
        hm = job_heatmap(st.report, variant)  # type: ignore[arg-type]
        m = hm.matrix()
        assert m.shape == (4, 2)
        assert np.unravel_index(np.argmax(m), m.shape)[0] == 3
        assert m[3].min() > m[:3].max()
    out = tmp_path / "st.png"
    render_png(job_heatmap(st.report), out)
    from matplotlib.image import imread

    img = imread(out)[..., :3]
    # The hot row is drawn red: plenty of pixels with a high red and low green channel.
    assert ((img[..., 0] > 0.6) & (img[..., 1] < 0.4)).sum() > 500


def test_causes_are_sorted_and_json_has_the_public_keys(se: Diagnosis) -> None:
    data = se.model_dump(mode="json")
    for key in ("summary", "slowdown", "straggling", "causes", "remedies", "similar_incidents", "report"):
        assert key in data
    conf = [c["confidence"] for c in data["causes"]]
    assert conf == sorted(conf, reverse=True)
    for c in data["causes"]:
        assert set(c) >= {"id", "confidence", "location", "pattern", "evidence", "summary"}
    for r in data["remedies"]:
        assert set(r) >= {"cause_id", "action", "predicted_speedup"} and r["predicted_speedup"] >= 1.0
