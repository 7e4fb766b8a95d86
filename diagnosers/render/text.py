"""Compact text renderings for chat and LLM replies: a heatmap grid and a diagnosis summary."""

from __future__ import annotations

from typing import TYPE_CHECKING

from diagnosers.heatmap import Heatmap, make_heatmap

if TYPE_CHECKING:
    from diagnosers.diagnose import Diagnosis

# Shade characters from cold to hot over [vmin, vmax]; the numbers stay the real information.
SHADES = " .:-=+*#%@"


def render_grid(heatmap: Heatmap, *, max_cols: int = 16, max_rows: int = 16, shades: bool = False) -> str:
    """A fixed-width grid: one line per PP rank (or bucket), one 4-character cell per DP rank.

    Grids wider than ``max_cols`` or taller than ``max_rows`` are re-bucketed (maximum per bucket)
    and the text says so. With ``shades`` a one-character heat mark follows each value.
    """
    hm = heatmap
    m = hm.matrix()
    if m.shape[1] > max_cols or m.shape[0] > max_rows:
        rb = make_heatmap(
            m,
            title=hm.title,
            variant=hm.variant,
            step=hm.step,
            max_cols=max_cols,
            max_rows=max_rows,
            scale=hm.scale,
        )
        update: dict[str, object] = {
            "note": f"{hm.dp_size} x {hm.pp_size} grid bucketed to {len(rb.dp_labels)} x "
            f"{len(rb.pp_labels)} cells; each cell shows its bucket's maximum"
        }
        if hm.bucketed:
            # Already bucketed once: bucket the bucket matrix, keeping the coarser labels honest.
            update |= {
                "dp_labels": [_merge(hm.dp_labels, lbl) for lbl in rb.dp_labels],
                "pp_labels": [_merge(hm.pp_labels, lbl) for lbl in rb.pp_labels],
                "dp_size": hm.dp_size,
                "pp_size": hm.pp_size,
            }
        rb = rb.model_copy(update=update)
        hm, m = rb, rb.matrix()
    width = max(5, max(len(lbl) for lbl in hm.dp_labels) + 1)
    rl = max(3, max(len(lbl) for lbl in hm.pp_labels))
    lines = [hm.title]
    notes = [n for n in (hm.note, hm.scale_note) if n]
    if notes:
        lines.append(f"({'; '.join(notes)})")
    corner = "PP\\DP"
    lines.append(
        f"{corner:>{rl + 3}} " + "".join(f"{lbl:>{width + (1 if shades else 0)}}" for lbl in hm.dp_labels)
    )
    for r, lbl in enumerate(hm.pp_labels):
        cells = []
        for v in m[r]:
            cell = f"{v:>{width}.2f}"
            if shades:
                frac = (v - hm.vmin) / (hm.vmax - hm.vmin)
                cell += SHADES[int(min(max(frac, 0.0), 1.0) * (len(SHADES) - 1))]
            cells.append(cell)
        lines.append(f"pp {lbl:>{rl}} " + "".join(cells))
    r, c, v = hm.hottest()
    lines.append(f"hottest: PP {hm.pp_labels[r]}, DP {hm.dp_labels[c]} = {v:.3f}")
    return "\n".join(lines)


def _merge(labels: list[str], bucket_label: str) -> str:
    """Map a bucket label over indices of ``labels`` back to the original rank range."""
    if "-" in bucket_label:
        a, b = (int(x) for x in bucket_label.split("-"))
    else:
        a = b = int(bucket_label)
    first, last = labels[a].split("-")[0], labels[b].split("-")[-1]
    return first if first == last else f"{first}-{last}"


def render_diagnosis(diagnosis: Diagnosis, *, grid: bool = True) -> str:
    """A readable multi-line summary: the summary (which opens with UNRELIABLE when the fidelity
    is), the fidelity line, causes ranked by marginal gain, remedies, similar incidents, grid."""
    d = diagnosis
    lines = [d.summary, ""]
    f = d.fidelity
    lines.append(f"fidelity: {f.verdict.value.upper()} ({f.reason})")
    lines.append(
        f"slowdown S = {d.slowdown:.3f} ({'straggling' if d.straggling else 'not straggling'}; "
        f"launch slowdown {d.report.launch_slowdown:.3f})"
    )
    if d.causes:
        lines.append("causes (largest gain first):")
        for i, c in enumerate(d.causes, 1):
            gain = f"fixing it alone x{c.marginal_gain:.3f}, " if c.marginal_gain is not None else ""
            lines.append(
                f"  {i}. {c.id} ({gain}confidence {c.confidence:.2f}) at {_where(c.location.model_dump())}"
            )
            lines.append(f"     {c.summary}")
    else:
        lines.append("causes: none matched")
    if d.remedies:
        lines.append("remedies (gain simulated by the what-if engine):")
        for rem in d.remedies:
            mark = " [destructive]" if rem.destructive else ""
            lines.append(
                f"  - [{rem.cause_id}]{mark} {rem.action} -> predicted speedup x{rem.predicted_speedup:.3f}"
            )
    if d.similar_incidents:
        lines.append("similar incidents:")
        for s in d.similar_incidents:
            lines.append(f"  - {s.id} {s.title} (score {s.score:.2f})")
    if grid and d.heatmap is not None:
        lines.append("")
        lines.append(render_grid(d.heatmap))
    return "\n".join(lines)


def _where(loc: dict[str, list[int]]) -> str:
    parts = []
    for key, name in (("dp_ranks", "dp"), ("pp_ranks", "pp"), ("hosts", "host"), ("steps", "steps")):
        vals = loc.get(key) or []
        if not vals:
            continue
        parts.append(f"{name} {_compact(vals)}")
    return ", ".join(parts) or "job-wide"


def _compact(vals: list[int], limit: int = 8) -> str:
    if len(vals) <= limit:
        return ",".join(str(v) for v in vals)
    return ",".join(str(v) for v in vals[:limit]) + f",... ({len(vals)} total)"
