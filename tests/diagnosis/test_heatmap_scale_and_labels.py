"""Heatmaps say what they show: clipping of the fixed scale, the adaptive scale, plain titles, and
tick labels and cell values that never overlap at any grid size."""

from __future__ import annotations

import itertools
from io import BytesIO

import numpy as np
import pytest

from diagnosers.heatmap import VMAX, VMIN, make_heatmap, rescale, scale_range
from diagnosers.render.text import render_grid


def _map(dp: int, pp: int, hot: float = 2.3, base: float = 1.0, spread: float = 0.3):
    rng = np.random.default_rng(dp * 100 + pp)
    m = base + rng.random((pp, dp)) * spread
    m[0, 0] = hot
    return m


def test_fixed_scale_says_when_it_is_clipped_and_adaptive_shows_the_range() -> None:
    hm = make_heatmap(_map(8, 2), title="t", variant="exact")
    assert (hm.vmin, hm.vmax, hm.scale) == (VMIN, VMAX, "fixed")
    assert hm.clipped == 1
    assert hm.scale_note is not None and "above 1.50 (up to 2.30)" in hm.scale_note
    assert "adaptive" in hm.scale_note
    assert "scale clipped" in render_grid(hm)
    ad = rescale(hm, "adaptive")
    assert ad.vmin == 1.0 and ad.vmax == 2.3 and ad.clipped == 0 and ad.scale_note is None


def test_adaptive_scale_stretches_a_mild_map_and_keeps_a_minimum_span() -> None:
    mild = np.array([[1.0, 1.01, 1.04]])
    assert scale_range(mild, "adaptive") == (1.0, 1.04)
    flat = np.array([[1.001, 1.002]])
    lo, hi = scale_range(flat, "adaptive")
    assert lo == 1.0 and hi == pytest.approx(1.02)
    assert make_heatmap(mild, title="t", variant="exact").clipped == 0


def test_titles_say_in_words_what_a_cell_is() -> None:
    from diagnosers.heatmap import TITLES

    for text in TITLES.values():
        assert "min(" not in text and "1.00 = no effect" in text


def _overlaps(boxes: list) -> bool:
    boxes = sorted(boxes, key=lambda b: b.x0)
    return any(a.overlaps(b) for a, b in itertools.pairwise(boxes))


@pytest.mark.parametrize("dp,pp", [(2, 4), (16, 2), (32, 2), (64, 4), (96, 8), (512, 16)])
def test_no_two_labels_overlap(dp: int, pp: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Render, then measure every tick label and cell value with matplotlib's own renderer."""
    import diagnosers.render.png as png

    figures = []
    real = png._annotate

    def keep(fig, ax, hm, m):  # capture the figure to measure it after drawing
        real(fig, ax, hm, m)
        figures.append((fig, ax))

    monkeypatch.setattr(png, "_annotate", keep)
    hm = make_heatmap(_map(dp, pp), title="the slowest worker " * 12, variant="exact")
    data = png.render_png(hm)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    fig, ax = figures[0]
    renderer = fig.canvas.get_renderer()
    xs = [t.get_window_extent(renderer) for t in ax.get_xticklabels() if t.get_text()]
    ys = [t.get_window_extent(renderer) for t in ax.get_yticklabels() if t.get_text()]
    assert xs and ys
    assert not _overlaps(xs), f"x tick labels overlap at {dp} columns"
    assert not _overlaps([b.transformed(_swap()) for b in ys]), f"y tick labels overlap at {pp} rows"
    if len(hm.dp_labels) >= 64:
        assert len(xs) <= len(hm.dp_labels) // 2, "thin ticks at 64 columns and more"
    cells = [t.get_window_extent(renderer) for t in ax.texts]
    for a in cells:
        assert sum(a.overlaps(b) for b in cells) == 1, "a cell value overlaps its neighbour"
    # the title is wrapped inside the figure
    title = fig._suptitle.get_window_extent(renderer)
    assert title.x0 >= 0 and title.x1 <= fig.bbox.width + 1


def _swap():
    from matplotlib.transforms import Affine2D

    return Affine2D([[0, 1, 0], [1, 0, 0], [0, 0, 1]])


def test_png_is_a_small_palette_image() -> None:
    from PIL import Image

    import diagnosers.render.png as png

    data = png.render_png(make_heatmap(_map(32, 2), title="t", variant="exact"))
    img = Image.open(BytesIO(data))
    assert img.mode == "P" and len(data) < 22_000
