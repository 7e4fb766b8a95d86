"""PNG rendering of a :class:`~diagnosers.heatmap.Heatmap` with matplotlib's Agg backend.

SMon's conventions (METHOD.md A7): DP rank on x, PP rank on y (rank 0 at the top), colour map
``Reds`` from 1.0 to 1.5, colour bar on top, cell values annotated when the grid is small enough to
read them. Uses the object-oriented ``Figure`` API (no pyplot global state), so it is safe to call
from a server thread.
"""

from __future__ import annotations

from io import BytesIO
from pathlib import Path

from diagnosers.heatmap import Heatmap

# Above this many cells, annotations would overlap; the colour alone carries the value.
ANNOTATE_MAX_CELLS = 400


def render_png(heatmap: Heatmap, path: str | Path | None = None, *, dpi: int = 110) -> bytes:
    """Draw the heatmap and return the PNG bytes; also write them to ``path`` when given.

    The figure size grows with the grid but is capped (about 16 x 9 inches), so a bucketed
    512 x 16 job gives a bounded image; the bucketing note is printed under the title.
    """
    from matplotlib.figure import Figure

    m = heatmap.matrix()
    rows, cols = m.shape
    width = min(16.0, max(4.5, 1.2 + 0.55 * cols))
    height = min(9.0, max(3.0, 1.6 + 0.45 * rows))
    fig = Figure(figsize=(width, height), dpi=dpi)
    ax = fig.add_subplot(1, 1, 1)
    image = ax.imshow(
        m, cmap="Reds", vmin=heatmap.vmin, vmax=heatmap.vmax, aspect="auto", interpolation="nearest"
    )
    cbar = fig.colorbar(image, ax=ax, location="top", shrink=0.6, pad=0.02, fraction=0.08, aspect=40)
    cbar.set_label("slowdown (1.0 = ideal)")
    ax.set_xlabel("DP rank")
    ax.set_ylabel("PP rank")
    xt = _ticks(cols)
    yt = _ticks(rows)
    ax.set_xticks(xt, [heatmap.dp_labels[i] for i in xt], rotation=90 if heatmap.bucketed or cols > 24 else 0)
    ax.set_yticks(yt, [heatmap.pp_labels[i] for i in yt])
    if rows * cols <= ANNOTATE_MAX_CELLS:
        mid = (heatmap.vmin + heatmap.vmax) / 2
        size = 9 if cols <= 16 else 7
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
    title = heatmap.title if not heatmap.note else f"{heatmap.title}\n{heatmap.note}"
    fig.suptitle(title, fontsize=9, y=0.995)
    fig.tight_layout()
    buf = BytesIO()
    fig.savefig(buf, format="png")
    data = buf.getvalue()
    if path is not None:
        Path(path).write_bytes(data)
    return data


def _ticks(n: int, limit: int = 32) -> list[int]:
    """Tick positions: every cell up to ``limit`` cells, then evenly spaced."""
    if n <= limit:
        return list(range(n))
    step = -(-n // limit)
    return list(range(0, n, step))
