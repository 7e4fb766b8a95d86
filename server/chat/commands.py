"""Slash commands for Slack (``POST /api/chat/slack``) and Mattermost (``POST /api/chat/mattermost``).

The request is form-encoded. Slack's is verified with the app's signing secret (``v0`` HMAC of
timestamp and raw body, 5-minute replay window, constant-time compare), Mattermost's with the
command token; the server's bearer token does not apply to these two routes, the signature does.

Commands (the text after the slash command): ``status <job>``, ``diagnose <job|trace_id>``,
``heatmap <job>``, ``compare <job> <w1> <w2>``, ``incidents <query>``, ``similar <incident>``,
``help``. An answer ready within ``ANSWER_BUDGET_S`` (under the platforms' 3-second limit) is
the HTTP response; a slower one answers "analysing…" at once and posts the result to the
command's ``response_url`` when it is done.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import anyio
import httpx
from slack_sdk.models.blocks import (
    ContextBlock,
    HeaderBlock,
    MarkdownTextObject,
    PlainTextObject,
    SectionBlock,
)
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from server.core import jobs_api
from server.core.chat_render import render_blocks, render_markdown, render_text
from server.core.errors import ApiError, error_response
from server.core.history import window_summary
from server.core.signing import mattermost_refusal, slack_refusal

log = logging.getLogger("straggler_lens.chat")

ANSWER_BUDGET_S = 2.5
MAX_FORM_BYTES = 64 * 1024
TRACE_ID_RE = re.compile(r"^[0-9a-f]{32}$")
HELP = [
    "`status <job>` — the job's latest window and its trend",
    "`diagnose <job|trace_id>` — the diagnosis of the job's latest window, or of a stored trace",
    "`heatmap <job>` — the per-worker slowdown heatmap of the latest window",
    "`compare <job> <window1> <window2>` — did the fix help? S and causes before and after",
    "`incidents <query>` — search the incident library",
    "`similar <incident>` — incidents that look like this one",
    "`help` — this list",
]


@dataclass
class ChatAnswer:
    """One answer in both renderings: Markdown (Mattermost, other bots) and Block Kit (Slack)."""

    title: str
    markdown: str
    blocks: list[dict[str, Any]]
    text: str
    extra: dict[str, Any] = field(default_factory=dict)

    def slack(self) -> dict[str, Any]:
        return {"response_type": "ephemeral", "text": self.text, "blocks": self.blocks}

    def mattermost(self) -> dict[str, Any]:
        return {"response_type": "ephemeral", "text": self.markdown}


def lines_answer(title: str, lines: list[str]) -> ChatAnswer:
    """A list answer (help, incidents, compare): the same lines in Markdown and in a section."""
    body = "\n".join(lines) or "(nothing)"
    blocks = [
        HeaderBlock(text=PlainTextObject(text=title[:150])).to_dict(),
        SectionBlock(text=MarkdownTextObject(text=body.replace("**", "*")[:2900])).to_dict(),
    ]
    return ChatAnswer(title, f"### {title}\n\n{body}\n", blocks, f"{title}: " + "; ".join(lines)[:500])


def summary_answer(
    monitor: Any, summary: dict[str, Any], title: str, job: str | None, **kw: Any
) -> ChatAnswer:
    link = monitor.job_link(job) if job else None
    return ChatAnswer(
        title,
        render_markdown(summary, title, link) + (f"\n```\n{kw['grid']}\n```\n" if kw.get("grid") else ""),
        render_blocks(summary, title, link, **kw),
        render_text(summary, title, link),
    )


def _latest_done(monitor: Any, job: str) -> Any:
    detail = jobs_api.get_job(monitor, job, 20)
    for w in detail.windows:
        if w.status == "done":
            return jobs_api.get_window(monitor, job, w.window), detail
    raise ApiError(409, "no_analysed_window", f"job {job!r} has no analysed window yet")


class Commands:
    """Dispatch one command text to its handler (synchronous: runs in a worker thread)."""

    def __init__(self, monitor: Any):
        self.monitor = monitor
        self.lens = monitor.lens

    def run(self, text: str) -> ChatAnswer:
        words = text.split()
        if not words or words[0].lower() == "help":
            return lines_answer("Straggler Lens commands", HELP)
        cmd, args = words[0].lower(), words[1:]
        handler: Callable[[list[str]], ChatAnswer] | None = getattr(self, f"cmd_{cmd}", None)
        if handler is None:
            return lines_answer(f"Unknown command {cmd!r}", HELP)
        try:
            return handler(args)
        except ApiError as exc:
            return lines_answer(f"{cmd}: {exc.message}", [])

    @staticmethod
    def _need(args: list[str], n: int, usage: str) -> None:
        if len(args) < n:
            raise ApiError(400, "usage", f"usage: {usage}")

    def cmd_status(self, args: list[str]) -> ChatAnswer:
        self._need(args, 1, "status <job>")
        job = args[0]
        detail = jobs_api.get_job(self.monitor, job, 20)
        latest = detail.windows[0] if detail.windows else None
        t = detail.trend["slowdown"]
        rho = t["rho"]
        trend_line = f"trend over {detail.trend['windows']} analysed windows: " + (
            f"rank correlation of S with time {rho:+.2f}" + (" (growing)" if t["growing"] else "")
            if rho is not None
            else "unknown (fewer than 3 windows)"
        )
        if latest is not None and latest.status == "done":
            w = jobs_api.get_window(self.monitor, job, latest.window)
            assert w.summary is not None
            ans = summary_answer(self.monitor, w.summary, f"{job} / window {w.window}", job)
            ans.markdown += f"\n{trend_line}\n"
            ans.blocks.insert(1, SectionBlock(text=MarkdownTextObject(text=trend_line)).to_dict())
            return ans
        state = f"latest window {latest.window}: {latest.status}" if latest else "no windows yet"
        if latest is not None and latest.reason:
            state += f" ({latest.reason})"
        return lines_answer(f"{job}", [state, trend_line])

    def cmd_diagnose(self, args: list[str]) -> ChatAnswer:
        self._need(args, 1, "diagnose <job|trace_id>")
        target = args[0]
        if TRACE_ID_RE.match(target) and not self.monitor.jobs.has_job(target):
            summary = window_summary(self.lens.diagnosis(target))
            return summary_answer(self.monitor, summary, f"trace {target}", None)
        w, _ = _latest_done(self.monitor, target)
        return summary_answer(self.monitor, w.summary, f"{target} / window {w.window}", target)

    def cmd_heatmap(self, args: list[str]) -> ChatAnswer:
        self._need(args, 1, "heatmap <job>")
        job = args[0]
        w, _ = _latest_done(self.monitor, job)
        base = self.monitor.settings.public_url
        if base:
            url = f"{base}/api/traces/{w.trace_id}/heatmap.png"
            return summary_answer(self.monitor, w.summary, f"{job} / window {w.window}", job, image_url=url)
        # the text grid only: from the cached report, without drawing the PNG
        from diagnosers.heatmap import job_heatmap
        from diagnosers.render.text import render_grid

        hm = job_heatmap(self.lens.whatif(w.trace_id))
        grid = render_grid(hm) if hm is not None else "(no heatmap for this window)"
        ans = summary_answer(self.monitor, w.summary, f"{job} / window {w.window}", job, grid=grid)
        # no address the platform can reach: name the server's routes for the image and the job
        where = f"image: `/api/traces/{w.trace_id}/heatmap.png` · job: `/api/jobs/{job}` on this server"
        ans.markdown += f"\n{where}\n"
        ans.blocks.append(ContextBlock(elements=[MarkdownTextObject(text=where)]).to_dict())
        return ans

    def cmd_compare(self, args: list[str]) -> ChatAnswer:
        self._need(args, 3, "compare <job> <window1> <window2>")
        c = jobs_api.compare_windows(self.monitor, args[0], args[1], args[2])
        verdict = "better" if c.improved else "not better"
        lines = [f"**S {c.slowdown_before:.3f} → {c.slowdown_after:.3f}** ({verdict})"]
        for cause in c.causes:
            lines.append(f"• `{cause['id']}`: {cause['change']}")
        for w in c.workers[:3]:
            lines.append(
                f"• worker dp {w['dp_rank']} / stage {w['pp_rank']}: {w['before']:.2f} → {w['after']:.2f}"
            )
        for r in c.remedies[:3]:
            actual = r["actual_speedup"]
            lines.append(
                f"• predicted ×{r['predicted_speedup']:.2f} for {r['cause_id']}, happened "
                + (f"×{actual:.2f}" if actual else "unknown")
                + f" (cause {r['cause_after']})"
            )
        return lines_answer(f"{c.job}: {c.before} vs {c.after}", lines)

    def _library(self) -> Any:
        if self.lens.library is None:
            raise ApiError(503, "no_library", "the incident library is not installed on this server")
        return self.lens.library

    def cmd_incidents(self, args: list[str]) -> ChatAnswer:
        from server.core.incident_glue import search_or_list

        self._need(args, 1, "incidents <query>")
        res = search_or_list(self._library(), " ".join(args), {}, 5, 0)
        lines = [f"• *{h.id}* {h.title}" for h in res.results] or [res.message or "no incident matched"]
        return lines_answer(f"Incidents: {' '.join(args)[:100]}", lines)

    def cmd_similar(self, args: list[str]) -> ChatAnswer:
        from server.core.incident_glue import similar

        self._need(args, 1, "similar <incident>")
        self._library()
        res = similar(self.lens, case_id=args[0], trace_id=None, text=None, limit=5)
        lines = [f"• *{h.id}* {h.title} ({h.score:.0f})" for h in res.results] or ["nothing similar"]
        return lines_answer(f"Incidents similar to {args[0]}", lines)


# -- HTTP --------------------------------------------------------------------------------------


async def _read_form(request: Request) -> bytes:
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise ApiError(413, "form_too_large", f"a slash-command form is at most {MAX_FORM_BYTES} bytes")
    return body


def _field(form: dict[str, list[str]], name: str) -> str:
    values = form.get(name) or [""]
    return values[0]


async def _post_later(response_url: str, answer: ChatAnswer, platform: str, done: anyio.Event) -> None:
    """Post a finished answer to the command's ``response_url`` (the delayed-answer path)."""
    body = answer.slack() if platform == "slack" else answer.mattermost()
    body["replace_original"] = True
    try:
        async with httpx.AsyncClient(timeout=10) as client:
            resp = await client.post(response_url, json=body)
        log.info("delayed %s answer posted to response_url: HTTP %d", platform, resp.status_code)
    except httpx.HTTPError as exc:
        log.warning("could not post the delayed answer to response_url: %s", exc)
    done.set()


async def _command(request: Request, platform: str) -> Response:
    monitor = getattr(request.app.state, "monitor", None)
    settings = request.app.state.lens.settings
    secret = settings.slack_signing_secret if platform == "slack" else settings.mattermost_token
    if monitor is None or not secret:
        option = "--slack-signing-secret-file" if platform == "slack" else "--mattermost-token-file"
        return error_response(
            404, "not_enabled", f"{platform} commands are off; start the server with {option}"
        )
    raw = await _read_form(request)
    form = parse_qs(raw.decode("utf-8", "replace"), keep_blank_values=True)
    if platform == "slack":
        refusal = slack_refusal(secret, raw, request.headers)
    else:
        refusal = mattermost_refusal(secret, request.headers, _field(form, "token"))
    if refusal:
        return error_response(401, "bad_signature", refusal)
    text, response_url = _field(form, "text").strip(), _field(form, "response_url")
    commands = Commands(monitor)
    result: dict[str, ChatAnswer] = {}
    finished = anyio.Event()

    def work() -> ChatAnswer:
        try:
            result["answer"] = commands.run(text)
        except Exception as exc:  # the chat user gets a line, the log the traceback
            log.exception("slash command %r failed", text)
            result["answer"] = lines_answer(f"{text.split()[0] if text else 'command'} failed: {exc}", [])
        return result["answer"]

    async def run_inline() -> None:
        await anyio.to_thread.run_sync(work)
        finished.set()

    if not response_url.startswith(("http://", "https://")):
        answer = await anyio.to_thread.run_sync(work)  # nowhere to post later: answer when done
    else:
        # the first try runs in the monitor's task group, so it outlives this request
        job_done = anyio.Event()
        monitor.spawn(run_inline)
        with anyio.move_on_after(min(ANSWER_BUDGET_S, settings.chat_answer_s)):
            await finished.wait()
        if "answer" in result:
            answer = result["answer"]
        else:
            monitor.spawn(_wait_then_post, monitor, response_url, finished, result, platform, job_done)
            wait = lines_answer("analysing…", [f"`{text[:80]}`: the answer will follow here."])
            return JSONResponse(wait.slack() if platform == "slack" else wait.mattermost())
    return JSONResponse(answer.slack() if platform == "slack" else answer.mattermost())


async def _wait_then_post(
    monitor: Any,
    response_url: str,
    finished: anyio.Event,
    result: dict[str, ChatAnswer],
    platform: str,
    done: anyio.Event,
) -> None:
    await finished.wait()
    answer = result["answer"]
    await _post_later(response_url, answer, platform, done)


async def slack_command(request: Request) -> Response:
    return await _command(request, "slack")


async def mattermost_command(request: Request) -> Response:
    return await _command(request, "mattermost")


def routes() -> list[BaseRoute]:
    return [
        Route("/api/chat/slack", slack_command, methods=["POST"]),
        Route("/api/chat/mattermost", mattermost_command, methods=["POST"]),
    ]
