"""The MCP App: the diagnosis view (heatmap, causes, per-step chart) inside the assistant.

``diagnose`` and ``get_heatmap`` are bound to the ``ui://straggler-lens/diagnosis.html``
resource through the SDK's Apps extension (``mcp.server.apps``). The document is rendered by the
web surface from the pages' templates and static files and handed in by the assembler
(``server.app``), since surfaces never import each other; without it (``build_mcp`` alone) the
two tools are plain tools. Hosts hand the view the tool result by postMessage.

A client that negotiated Apps gets the same result plus ``_meta[DETAIL_KEY]``: each cell's ranks
and hosts and the per-step maps (``diagnosers.heatmap_detail.heatmap_detail``), so the view can offer
its step selector; every other client gets exactly the answer it got before the App existed.
"""

from __future__ import annotations

import base64
import functools
from collections.abc import Callable
from typing import Annotated, Any, Literal

import anyio
from mcp.server.apps import Apps, ResourceCsp, client_supports_apps
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, ImageContent, TextContent
from pydantic import Field

from server.core.service import Lens
from server.mcp.shared import READ_ONLY, ProgressRelay, TraceId, tool_errors
from server.mcp.views import DiagnosisView, HeatmapView, compact_result, diagnosis_view, heatmap_view

APP_URI = "ui://straggler-lens/diagnosis.html"
DETAIL_KEY = "straggler-lens/heatmap-detail"
# per-step maps sent to the App: enough to page through the worst steps, bounded in size
APP_MAX_STEPS = 16


Tool = tuple[Callable[..., Any], dict[str, Any]]


def app_tools(apps: Apps, lens: Callable[[], Lens], have: dict[str, bool], html: str | None) -> list[Tool]:
    """Bind the two tools to the App resource ``html`` (before the MCPServer is built: the SDK
    applies an extension's tools when it constructs the server). Without ``html`` nothing is
    bound and the (function, ``add_tool`` keywords) pairs are returned for plain registration."""
    if not have["whatif"]:
        return []
    if html is not None:
        apps.add_html_resource(
            APP_URI,
            html,
            title="Straggler Lens diagnosis",
            description="DP x PP heatmap, causes and per-step slowdown of a diagnosed trace",
            csp=ResourceCsp(connect_domains=[]),
            prefers_border=True,
        )
    plain: list[Tool] = []

    def tool(**kw: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def bind(fn: Callable[..., Any]) -> Callable[..., Any]:
            if html is not None:
                apps.tool(resource_uri=APP_URI, visibility=["model", "app"], **kw)(fn)
            else:
                plain.append((fn, kw))
            return fn

        return bind

    async def run(fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kw))

    async def with_detail(result: CallToolResult, trace_id: str, ctx: Context[Any]) -> CallToolResult:
        """The result itself for clients without Apps; with the heatmap detail for the App."""
        if not client_supports_apps(ctx):
            return result
        from diagnosers.heatmap_detail import heatmap_detail

        L = lens()
        report = await run(L.whatif, trace_id)
        detail = await run(heatmap_detail, report, max_steps=APP_MAX_STEPS)
        return result.model_copy(update={"meta": {DETAIL_KEY: detail.model_dump(mode="json")}})

    @tool(title="Slowdown heatmap (DP x PP)", annotations=READ_ONLY)
    @tool_errors
    async def get_heatmap(
        trace_id: TraceId,
        ctx: Context[Any],
        step: Annotated[int | None, Field(description="one step's heatmap; omit for the whole job")] = None,
        scale: Annotated[
            Literal["fixed", "adaptive"],
            Field(description="colours: the study's fixed 1.0-1.5, or stretched over the values"),
        ] = "fixed",
    ) -> Annotated[CallToolResult, HeatmapView]:
        """A DP-rank x PP-rank slowdown heatmap as a PNG image plus a text grid (1.0 = not slowed).

        A hot row is one slow pipeline stage, a hot cell one slow worker. The grid says when the
        colour scale is clipped. PNG also at GET /api/traces/{trace_id}/heatmap.png[?step=N].
        """
        L = lens()
        png, hm, grid = await run(L.heatmap, trace_id, step, scale)
        view = heatmap_view(trace_id, hm, grid, len(png))
        result = CallToolResult(
            content=[
                TextContent(type="text", text=grid),
                ImageContent(type="image", data=base64.b64encode(png).decode(), mime_type="image/png"),
            ],
            structured_content=view.model_dump(mode="json"),
        )
        return await with_detail(result, trace_id, ctx)

    if not have["diagnose"]:
        return plain

    @tool(title="Diagnose a slow job", annotations=READ_ONLY)
    @tool_errors
    async def diagnose(trace_id: TraceId, ctx: Context[Any]) -> Annotated[CallToolResult, DiagnosisView]:
        """Diagnose one trace: slowdown, ranked causes with location (DP/PP ranks, steps), remedies with
        simulated speedups, similar past incidents and the per-worker heatmap values.

        The shape of `straggler-lens diagnose --json`, with long lists capped (see `truncated`);
        the full document is at GET /api/traces/{trace_id}/diagnosis.
        """
        relay = ProgressRelay(ctx)
        L = lens()
        key = ("view:diagnosis", trace_id)
        view: DiagnosisView | None = L.peek(*key)
        if view is None:
            view = L.memo(key, await run(lambda: diagnosis_view(trace_id, L.diagnosis(trace_id, relay))))
        await relay.step(1.0, "done")
        return await with_detail(compact_result(view), trace_id, ctx)

    return plain
