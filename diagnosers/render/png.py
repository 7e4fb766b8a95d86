"""PNG rendering of a :class:`~diagnosers.heatmap.Heatmap` with matplotlib's Agg backend.

SMon's conventions (METHOD.md A7): DP rank on x, PP rank on y (rank 0 at the top), colour map
``Reds`` from 1.0 to 1.5, colour bar on top, cell values annotated when the grid is small enough to
read them. Uses the object-oriented ``Figure`` API (no pyplot global state), so it is safe to call
from a server thread.
"""

from __future__ import annotations

import textwrap
from io import BytesIO
from pathlib import Path
from typing import Any

from diagnosers.heatmap import Heatmap

# Above this many cells, annotations would overlap; the colour alone carries the value.
ANNOTATE_MAX_CELLS = 400
# Tick and annotation font size in points, and the room a label needs beside its neighbour.
FONT_PT = 8.0
LABEL_GAP_PX = 4.0
# From this many columns on, at most every other column is labelled.
WIDE_COLUMNS = 64
# A PNG of a heatmap has few colours; a 64-colour palette keeps it small (the MCP answer
# carries it in base64); 64 keep the colour ramp smooth enough to read.
PALETTE_COLOURS = 64


def render_png(heatmap: Heatmap, path: str | Path | None = None, *, dpi: int = 100) -> bytes:
    """Draw the heatmap and return the PNG bytes; also write them to ``path`` when given.

    The figure size grows with the grid but is capped (about 12 x 7 inches), so a bucketed
    512 x 16 job gives a bounded image. Under the title: the bucketing note and, when values fall
    outside the colour scale, the clipping note. Tick labels are thinned to every k-th cell so
    that no two labels overlap at the cell width drawn (k from the label's measured size), and
    cell values are written only when they fit inside their cell.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    m = heatmap.matrix()
    rows, cols = m.shape
    width = min(12.0, max(5.0, 1.2 + 0.45 * cols))
    height = min(7.0, max(3.2, 1.8 + 0.4 * rows))
    fig = Figure(figsize=(width, height), dpi=dpi)
    FigureCanvasAgg(fig)  # an Agg canvas, so label sizes can be measured before saving
    ax = fig.add_subplot(1, 1, 1)
    image = ax.imshow(
        m, cmap="Reds", vmin=heatmap.vmin, vmax=heatmap.vmax, aspect="auto", interpolation="nearest"
    )
    extend = _extend(heatmap)
    cbar = fig.colorbar(
        image, ax=ax, location="top", shrink=0.6, pad=0.02, fraction=0.08, aspect=40, extend=extend
    )
    scale = "the study's fixed 1.0-1.5 scale" if heatmap.scale == "fixed" else "adaptive scale"
    cbar.set_label(f"slowdown (1.00 = ideal; {scale})", fontsize=FONT_PT)
    cbar.ax.tick_params(labelsize=FONT_PT)
    ax.set_xlabel("DP rank", fontsize=FONT_PT + 1)
    ax.set_ylabel("PP rank (stage)", fontsize=FONT_PT + 1)
    lines = [heatmap.title, *(n for n in (heatmap.note, heatmap.scale_note) if n)]
    chars = max(40, int(width * 72 / (0.7 * 9)))  # 9-point characters per line, with margin
    title = "\n".join(textwrap.fill(line, chars) for line in lines)
    fig.suptitle(title, fontsize=9, y=0.995)
    fig.tight_layout()
    _label_axes(fig, ax, heatmap, rows, cols)
    _annotate(fig, ax, heatmap, m)
    fig.tight_layout()
    buf = BytesIO()
    fig.savefig(buf, format="png")
    data = _palette(buf.getvalue())
    if path is not None:
        Path(path).write_bytes(data)
    return data


def _extend(heatmap: Heatmap) -> Any:
    """Colour-bar arrows at the clipped ends (matplotlib's ``extend``)."""
    m = heatmap.matrix()
    hi = bool((m > heatmap.vmax + 1e-9).any())
    lo = bool((m < heatmap.vmin - 0.005).any())
    return "both" if hi and lo else "max" if hi else "min" if lo else "neither"


def cell_pixels(fig: Any, ax: Any, rows: int, cols: int) -> tuple[float, float]:
    """(width, height) of one cell in output pixels."""
    box = ax.get_window_extent(fig.canvas.get_renderer())
    return box.width / max(1, cols), box.height / max(1, rows)


def tick_stride(cell_px: float, label_px: float) -> int:
    """Label every k-th cell, with k the smallest count of cells wider than one label plus a gap."""
    return max(1, int(-(-(label_px + LABEL_GAP_PX) // max(cell_px, 1e-6))))


def _label_axes(fig: Any, ax: Any, heatmap: Heatmap, rows: int, cols: int) -> None:
    """Tick labels that never overlap: horizontal when the widest fits its cell, else vertical,
    and thinned by :func:`tick_stride` (``FONT_PT`` points is ``FONT_PT * dpi / 72`` pixels)."""
    cw, ch = cell_pixels(fig, ax, rows, cols)
    px = FONT_PT * fig.dpi / 72
    widest = max(len(lbl) for lbl in heatmap.dp_labels) * 0.62 * px
    vertical = widest + LABEL_GAP_PX > cw
    xs = tick_stride(cw, px * 1.2 if vertical else widest)
    if cols >= WIDE_COLUMNS:
        xs = max(xs, 2)  # a wall of 64+ vertical labels reads worse than every other one
    ys = tick_stride(ch, px * 1.2)
    xt = list(range(0, cols, xs))
    yt = list(range(0, rows, ys))
    ax.set_xticks(xt, [heatmap.dp_labels[i] for i in xt], rotation=90 if vertical else 0, fontsize=FONT_PT)
    ax.set_yticks(yt, [heatmap.pp_labels[i] for i in yt], fontsize=FONT_PT)


def _annotate(fig: Any, ax: Any, heatmap: Heatmap, m: Any) -> None:
    """Write each cell's value when "1.00" fits inside the cell (with a margin); else none."""
    rows, cols = m.shape
    if rows * cols > ANNOTATE_MAX_CELLS:
        return
    cw, ch = cell_pixels(fig, ax, rows, cols)
    size = FONT_PT + 1 if cols <= 16 else FONT_PT
    px = size * fig.dpi / 72
    if 4 * 0.62 * px + LABEL_GAP_PX > cw or px * 1.2 + LABEL_GAP_PX > ch:
        return
    mid = (heatmap.vmin + heatmap.vmax) / 2
    for r in range(rows):
        for c in range(cols):
            v = m[r, c]
            ax.text(
                c,
                r,
                f"{v:.2f}",
                ha="center",
                va="center",
                fontsize=size,
                color="white" if v > mid else "black",
            )


def _palette(png: bytes) -> bytes:
    """The PNG re-encoded with a colour palette (Pillow ships with matplotlib)."""
    try:
        from PIL import Image
    except ModuleNotFoundError:  # pragma: no cover - matplotlib requires Pillow
        return png
    img = Image.open(BytesIO(png)).convert("RGB")
    out = BytesIO()
    img.quantize(colors=PALETTE_COLOURS).save(out, format="PNG", optimize=True)
    return out.getvalue()
