"""The MCP ``export_timeline`` tool and the ``trace://{id}/timeline/{steps}`` resource.

The tool never puts the timeline itself in the answer (it is hundreds of kilobytes per step on a
large job): it answers a resource link with the document's size, plus a short view of the chosen
steps' critical paths. The resource (or ``GET /api/traces/{id}/timeline.json?steps=...``) holds the
Chrome trace-event JSON.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Annotated, Any

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError
from mcp.types import CallToolResult, ResourceLink, TextContent
from pydantic import BaseModel, Field

from server.core.errors import ApiError
from server.core.service import Lens
from server.core.timeline import parse_steps, steps_key, timeline_analysis_json, timeline_json
from server.mcp.shared import READ_ONLY, TraceId, tool_errors

TOP_SHARES = 3  # op types per critical path in the tool's view


class PathView(BaseModel):
    step: int
    run: str
    length_s: float
    top_optypes: dict[str, float] = Field(description="largest shares of the path by op type")
    launch_gap_share: float


class TimelineExport(BaseModel):
    """Where the timeline is and how big it is, with the chosen steps' critical paths."""

    trace_id: str
    uri: str = Field(description="MCP resource holding the Chrome trace-event JSON")
    rest_path: str
    size_bytes: int
    events: int
    steps: list[int]
    straggler_free_step_time_s: float
    critical_paths: list[PathView]


def export_view(trace_id: str, body: str, analysis: dict[str, Any], key: str) -> TimelineExport:
    """The bounded view of one export (sizes and a few shares, never the events)."""
    doc = json.loads(body)
    steps = [s["step"] for s in doc["otherData"]["steps"]]
    paths = [
        PathView(
            step=cp["step"],
            run=cp["run"],
            length_s=cp["length"],
            top_optypes=dict(list(cp["share_by_optype"].items())[:TOP_SHARES]),
            launch_gap_share=cp["share_by_kind"].get("launch-gap", 0.0),
        )
        for cp in analysis["critical_paths"]
    ]
    query = "" if key == "default" else f"?steps={key}"
    return TimelineExport(
        trace_id=trace_id,
        uri=f"trace://{trace_id}/timeline/{key}",
        rest_path=f"/api/traces/{trace_id}/timeline.json{query}",
        size_bytes=len(body.encode()),
        events=len(doc["traceEvents"]),
        steps=steps,
        straggler_free_step_time_s=analysis["straggler_free_step_time"],
        critical_paths=paths,
    )


def register_timeline_tools(mcp: MCPServer[Any], lens: Callable[[], Lens]) -> None:
    """Register ``export_timeline`` and its resource template."""

    async def run(fn: Callable[..., Any], *args: Any) -> Any:
        return await anyio.to_thread.run_sync(functools.partial(fn, *args))

    @mcp.tool(title="Export a timeline (actual vs straggler-free)", annotations=READ_ONLY)
    @tool_errors
    async def export_timeline(
        trace_id: TraceId,
        steps: Annotated[
            list[int] | None,
            Field(description="step ids to export (at most 16); omit for the worst and a typical step"),
        ] = None,
    ) -> Annotated[CallToolResult, TimelineExport]:
        """Export a Chrome trace-event timeline (opens in Perfetto): per worker, the recorded ops and
        the simulated straggler-free ops, critical-path ops marked, P2P pairs and collectives linked.

        Answers a resource link (trace://{trace_id}/timeline/{steps}) with the file's size and the
        chosen steps' critical-path shares; the JSON itself is at the link or at
        GET /api/traces/{trace_id}/timeline.json?steps=N,N.
        """
        L = lens()
        chosen = parse_steps(",".join(str(s) for s in steps)) if steps else None
        body = await run(timeline_json, L, trace_id, chosen)
        shown = [s["step"] for s in json.loads(body)["otherData"]["steps"]]
        analysis = json.loads(await run(timeline_analysis_json, L, trace_id, shown))
        view = export_view(trace_id, body, analysis, steps_key(chosen))
        link = ResourceLink(
            type="resource_link",
            uri=view.uri,
            name=f"timeline-{trace_id}-{steps_key(chosen)}.json",
            title=f"Timeline of steps {', '.join(map(str, view.steps))}",
            mime_type="application/json",
            size=view.size_bytes,
        )
        text = (
            f"Timeline of steps {view.steps}: {view.size_bytes} bytes, {view.events} trace events, at "
            f"{view.uri} (or GET {view.rest_path}); open it in Perfetto. {view.model_dump_json()}"
        )
        return CallToolResult(
            content=[TextContent(type="text", text=text), link],
            structured_content=view.model_dump(mode="json"),
        )

    @mcp.resource(
        "trace://{trace_id}/timeline/{steps}", mime_type="application/json", title="Timeline (trace events)"
    )
    async def timeline_resource(trace_id: str, steps: str) -> str:
        """The Chrome trace-event JSON of steps ``N,N`` (or ``default``: the worst and a typical)."""
        L = lens()
        if L.store.get(trace_id) is None:
            raise ResourceNotFoundError(f"no trace {trace_id}")
        try:
            return str(await run(timeline_json, L, trace_id, parse_steps(steps)))
        except ApiError as exc:
            raise ResourceError(exc.message) from exc
