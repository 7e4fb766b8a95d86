"""One chat rendering of a diagnosis: Markdown (any bot, ``.../diagnosis.md``) and Block Kit.

Both render the same bounded projection (``server.core.history.window_summary``) so an alert, a
slash-command answer and the REST Markdown say the same things: S and wasted GPU time, fidelity,
the top causes with where they act, the best remedy with its predicted speedup, and a link.
Block Kit goes through ``slack_sdk``'s block models, whose ``to_dict()`` checks Slack's limits
(text lengths, block counts) before anything is sent.
"""

from __future__ import annotations

from typing import Any

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ContextBlock,
    DividerBlock,
    HeaderBlock,
    ImageBlock,
    MarkdownTextObject,
    PlainTextObject,
    SectionBlock,
)

TOP_CAUSES = 3
SECTION_LIMIT = 2900  # Slack's section text limit is 3000 characters


def _where(loc: dict[str, Any] | None) -> str:
    """``dp 3 · stage 1 · ranks 7 · steps 2-5`` from a Location (empty lists are left out)."""
    if not loc:
        return "location unknown"
    parts = []
    for key, label in (("dp_ranks", "dp"), ("pp_ranks", "stage"), ("ranks", "ranks"), ("hosts", "hosts")):
        if loc.get(key):
            parts.append(f"{label} {_span(loc[key])}")
    if loc.get("steps"):
        parts.append(f"steps {_span(loc['steps'])}")
    return " · ".join(parts) or "job-wide"


def _span(values: list[int], most: int = 8) -> str:
    vals = sorted(int(v) for v in values)
    if len(vals) > 2 and vals == list(range(vals[0], vals[-1] + 1)):
        return f"{vals[0]}-{vals[-1]}"
    text = ", ".join(str(v) for v in vals[:most])
    return text + (f" (+{len(vals) - most})" if len(vals) > most else "")


def _fidelity(summary: dict[str, Any]) -> str:
    """``good (unexplained error 1.2%)``; ``unknown`` for a summary without fidelity."""
    f = summary.get("fidelity")
    if not f:
        return "unknown"
    verdict = f.get("verdict", "unknown")
    err = f.get("unexplained_error", f.get("simulation_error"))
    return f"{verdict} (unexplained error {err:.1%})" if isinstance(err, int | float) else str(verdict)


def _gain(cause: dict[str, Any]) -> str:
    """A cause's marginal gain, the job speedup if only it were fixed: ``×1.150``."""
    g = cause.get("marginal_gain")
    return f"×{g:.3f}" if isinstance(g, int | float) else "unknown"


def headline(summary: dict[str, Any]) -> str:
    """One line: ``S = 1.31, 23.6% of GPU time wasted`` (or no straggler)."""
    s, w = summary.get("slowdown"), summary.get("wasted_fraction")
    if s is None:
        return "no diagnosis yet"
    text = f"S = {s:.2f}, {w:.1%} of GPU time wasted" if isinstance(w, int | float) else f"S = {s:.2f}"
    return text if summary.get("straggling") else text + " (no straggler: S < 1.1)"


def render_markdown(summary: dict[str, Any], title: str, link: str | None = None) -> str:
    """The Markdown rendering (CommonMark; Mattermost, Teams and most bots show it as is)."""
    lines = [f"### {title}", "", f"**{headline(summary)}** · fidelity: {_fidelity(summary)}", ""]
    lines.append(summary.get("summary") or "")
    causes = summary.get("causes") or []
    if causes:
        lines += ["", "| cause | confidence | marginal gain | where |", "|---|---|---|---|"]
        for c in causes[:TOP_CAUSES]:
            lines.append(
                f"| `{c['id']}` | {c['confidence']:.2f} | {_gain(c)} | {_where(c.get('location'))} |"
            )
        if len(causes) > TOP_CAUSES:
            lines.append(f"| … {len(causes) - TOP_CAUSES} more | | | |")
    best = summary.get("best_remedy")
    if best:
        lines += [
            "",
            f"**Best remedy** ({best['cause_id']}): {best['action']} — predicted speedup "
            f"×{best['predicted_speedup']:.2f}",
        ]
    if summary.get("missing_ranks"):
        lines += ["", f"_Ranks missing from this window: {_span(summary['missing_ranks'])}_"]
    if link:
        lines += ["", f"[Open the job]({link})"]
    return "\n".join(lines).strip() + "\n"


def render_text(summary: dict[str, Any], title: str, link: str | None = None) -> str:
    """Plain-text fallback (notifications, clients without blocks)."""
    text = f"{title}: {headline(summary)}"
    causes = summary.get("causes") or []
    if causes:
        text += "; causes: " + ", ".join(
            f"{c['id']} ({_where(c.get('location'))})" for c in causes[:TOP_CAUSES]
        )
    if link:
        text += f" — {link}"
    return text


def render_blocks(
    summary: dict[str, Any],
    title: str,
    link: str | None = None,
    image_url: str | None = None,
    grid: str | None = None,
) -> list[dict[str, Any]]:
    """The Block Kit rendering: header, headline with fidelity, the top causes with locations,
    the best remedy, the heatmap (an image when ``image_url`` is reachable by the chat
    platform, else ``grid`` as a code block) and a button to the job."""
    blocks: list[Block] = [
        HeaderBlock(text=PlainTextObject(text=title[:150])),
        SectionBlock(
            text=MarkdownTextObject(
                text=f"*{headline(summary)}*\n{(summary.get('summary') or '')[:SECTION_LIMIT]}"
            ),
            fields=[
                MarkdownTextObject(text=f"*Fidelity*\n{_fidelity(summary)}"),
                MarkdownTextObject(text=f"*Steps*\n{summary.get('steps_total', '?')}"),
            ],
        ),
    ]
    causes = summary.get("causes") or []
    if causes:
        rows = [
            f"• `{c['id']}` ({c['confidence']:.2f}, gain {_gain(c)}): {_where(c.get('location'))}"
            for c in causes[:TOP_CAUSES]
        ]
        blocks.append(SectionBlock(text=MarkdownTextObject(text="*Causes*\n" + "\n".join(rows))))
    best = summary.get("best_remedy")
    if best:
        text = f"*Best remedy* — {best['action']}\npredicted speedup ×{best['predicted_speedup']:.2f}"
        blocks.append(SectionBlock(text=MarkdownTextObject(text=text[:SECTION_LIMIT])))
    if image_url:
        blocks.append(ImageBlock(image_url=image_url, alt_text="per-worker slowdown heatmap"))
    elif grid:
        blocks.append(SectionBlock(text=MarkdownTextObject(text=f"```{grid[: SECTION_LIMIT - 8]}```")))
    blocks.append(DividerBlock())
    if summary.get("missing_ranks"):
        blocks.append(
            ContextBlock(
                elements=[MarkdownTextObject(text=f"missing ranks: {_span(summary['missing_ranks'])}")]
            )
        )
    if link:
        blocks.append(
            ActionsBlock(elements=[ButtonElement(text="Open the job", url=link, action_id="open-job")])
        )
    return [b.to_dict() for b in blocks]


def slack_message(summary: dict[str, Any], title: str, link: str | None = None, **kw: Any) -> dict[str, Any]:
    """A Slack message body: Block Kit plus the plain-text fallback Slack wants beside blocks."""
    return {"text": render_text(summary, title, link), "blocks": render_blocks(summary, title, link, **kw)}
