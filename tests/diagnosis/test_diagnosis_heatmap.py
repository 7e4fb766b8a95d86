"""Heatmap matrices and their renderings (PNG, text, JSON)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from diagnosers.heatmap import job_heatmap, make_heatmap, step_heatmaps, worker_matrix
from diagnosers.render.png import render_png
from diagnosers.render.text import render_grid
from diagnosers.report import WhatIfReport

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_st_estimate_heatmap_puts_the_maximum_on_the_last_row(st_expected_report: WhatIfReport) -> None:
    hm = job_heatmap(st_expected_report, "estimate")
    m = hm.matrix()
    assert m.shape == (4, 2)
    assert m[-1].max() == m.max()
    assert m[-1].min() > m[:-1].max()  # the whole last row is hotter than every other cell
    # min(S_dp, S_pp) of the artifact: stage 3's put-back is 1.232 but each DP rank's is ~1.175.
    assert m[3, 0] == pytest.approx(1.1731, abs=1e-3)
    row, _, _ = hm.hottest()
    assert row == 3


def test_png_renders_a_real_image(st_expected_report: WhatIfReport, tmp_path) -> None:
    out = tmp_path / "st.png"
    data = render_png(job_heatmap(st_expected_report, "estimate"), out)
    assert data.startswith(PNG_MAGIC)
    assert out.read_bytes() == data
    from matplotlib.image import imread

    img = imread(out)
    assert img.shape[0] > 200 and img.shape[1] > 300
    # Some pixels are strongly red (the hot last row), some nearly white (the cold rows).
    rgb = img[..., :3]
    red = (rgb[..., 0] > 0.6) & (rgb[..., 1] < 0.35) & (rgb[..., 2] < 0.35)
    assert red.sum() > 500


def test_large_grid_is_bucketed_and_keeps_the_hot_worker() -> None:
    m = np.ones((16, 512))
    m[5, 300] = 2.0
    hm = make_heatmap(m, title="big", variant="exact")
    assert hm.bucketed and hm.note and "bucket" in hm.note
    assert len(hm.dp_labels) <= 64 and len(hm.pp_labels) <= 32
    r, c, v = hm.hottest()
    assert v == 2.0
    lo, hi = (int(x) for x in hm.dp_labels[c].split("-"))
    assert lo <= 300 <= hi and hm.pp_labels[r] == "5"
    png = render_png(hm)
    assert png.startswith(PNG_MAGIC)
    text = render_grid(hm)
    assert "bucketed" in text and len(text.splitlines()) <= 20
    assert max(len(line) for line in text.splitlines()) < 200


def test_text_grid_lists_every_cell_of_a_small_grid(st_expected_report: WhatIfReport) -> None:
    text = render_grid(job_heatmap(st_expected_report, "estimate"))
    lines = text.splitlines()
    rows = [ln for ln in lines if ln.startswith("pp ")]
    assert len(rows) == 4
    assert all(len(r.split()) == 2 + 2 for r in rows)  # "pp", rank, two DP cells
    assert "hottest: PP 3" in text


def test_step_heatmaps_and_json_round_trip(st_expected_report: WhatIfReport) -> None:
    steps = step_heatmaps(st_expected_report)
    assert set(steps) == set(st_expected_report.steps)
    for step, hm in steps.items():
        assert hm.step == step and hm.variant == "step-estimate"
        again = type(hm).model_validate(json.loads(hm.model_dump_json()))
        assert again == hm
    # Every step of ST is slowed by its last stage.
    assert sum(hm.hottest()[0] == 3 for hm in steps.values()) == len(steps)


def test_exact_values_win_over_the_estimate(st_expected_report: WhatIfReport) -> None:
    rep = st_expected_report.model_copy(deep=True)
    rep.attribution.by_worker[0].slowdown = 1.42
    m = worker_matrix(rep, "exact")
    assert m[rep.attribution.by_worker[0].pp_rank, rep.attribution.by_worker[0].dp_rank] == 1.42
    assert worker_matrix(rep, "estimate")[0, 0] != 1.42
