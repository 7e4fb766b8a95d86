"""MCP tools over the engine and the diagnosis: run_whatif, get_heatmap, diagnose,
classify_patterns, suggest_remedies, plus the stored reports as resources.

Outputs are bounded views of the cached results (``server.mcp.views``); the full documents are at
``/api/traces/{id}/whatif`` and ``/api/traces/{id}/diagnosis``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Annotated, Any

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError
from mcp.types import CallToolResult
from pydantic import Field

from server.core.errors import ApiError
from server.core.service import Lens, scaled
from server.mcp.shared import READ_ONLY, ProgressRelay, TraceId, tool_errors
from server.mcp.views import (
    PatternsView,
    RemediesView,
    WhatIfResult,
    compact_result,
    patterns_view,
    remedies_view,
    whatif_result,
)

IntList = Annotated[
    list[int] | None, Field(description="ids to select; omit for no restriction", max_length=4096)
]


def register_analysis_tools(mcp: MCPServer[Any], lens: Callable[[], Lens], have: dict[str, bool]) -> None:
    """Register the engine tools (and the diagnosis tools when ``diagnosers.diagnose`` exists)."""

    async def run(fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kw))

    async def memoised(key: tuple[str, ...], fn: Callable[[], Any]) -> Any:
        """A result already in memory is answered on the event loop; otherwise ``fn`` runs in a
        worker thread and its value is remembered."""
        L = lens()
        hit = L.peek(*key)
        if hit is not None:
            return hit
        return L.memo(key, await run(fn))

    @mcp.tool(title="What-if analysis", annotations=READ_ONLY)
    @tool_errors
    async def run_whatif(
        trace_id: TraceId,
        ctx: Context[Any],
        optypes: Annotated[
            list[str] | None,
            Field(
                description="op types to idealise, e.g. forward-compute, backward-compute, "
                "grads-reduce-scatter, or the groups compute / comm"
            ),
        ] = None,
        dp_ranks: IntList = None,
        pp_ranks: IntList = None,
        steps: IntList = None,
        free_comm: Annotated[bool, Field(description="communication costs nothing in the scenario")] = False,
    ) -> Annotated[CallToolResult, WhatIfResult]:
        """Simulate the job with ops at their typical duration: how much straggling costs, and where.

        Without a selector: the standard report (slowdown S, wasted GPU share, attributions by op
        type / DP rank / stage / worker, M_W, M_S), bounded. With a selector (optypes, dp_ranks,
        pp_ranks, steps) or free_comm: only that subset is idealised, and the answer says how much
        of the slowdown it removes. Full report: GET /api/traces/{trace_id}/whatif.
        """
        L = lens()
        relay = ProgressRelay(ctx)
        selector = {"optypes": optypes, "dp_ranks": dp_ranks, "pp_ranks": pp_ranks, "steps": steps}
        wants_scenario = any(v is not None for v in selector.values()) or free_comm
        key = ("view:whatif", trace_id, repr(sorted(selector.items())), str(free_comm))
        hit = L.peek(*key)
        if hit is not None:
            return compact_result(hit)
        await relay.step(0.0, "loading the trace")
        report = await run(L.whatif, trace_id, scaled(relay, 0.0, 0.9) if wants_scenario else relay)
        scenario = None
        if wants_scenario:
            await relay.step(0.95, "running the scenario")
            scenario = await run(L.scenario, trace_id, free_comm=free_comm, **selector)
        result = await run(whatif_result, trace_id, report, scenario)
        await relay.step(1.0, "done")
        return compact_result(L.memo(key, result))

    async def stored_document(trace_id: str, kind: str) -> str:
        """The full JSON of a stored result (``whatif`` or ``diagnosis``), computed on first read."""
        L = lens()
        if L.store.get(trace_id) is None:
            raise ResourceNotFoundError(f"no trace {trace_id}")
        try:
            return await run(L.result_json, kind, trace_id)
        except ApiError as exc:
            raise ResourceError(exc.message) from exc

    @mcp.resource("trace://{trace_id}/whatif", mime_type="application/json", title="Stored what-if report")
    async def whatif_resource(trace_id: str) -> str:
        """The full what-if report of a stored trace (computed on first read, then cached)."""
        return await stored_document(trace_id, "whatif")

    if not have["diagnose"]:
        return

    @mcp.tool(title="Classify straggler patterns", annotations=READ_ONLY)
    @tool_errors
    async def classify_patterns(trace_id: TraceId, ctx: Context[Any]) -> PatternsView:
        """The causes whose signature matches this trace, ranked by marginal gain, with their spatial /
        temporal / resource pattern, location and the evidence numbers."""
        L = lens()
        relay = ProgressRelay(ctx)
        view: PatternsView = await memoised(
            ("view:patterns", trace_id), lambda: patterns_view(trace_id, L.diagnosis(trace_id, relay))
        )
        return view

    @mcp.tool(title="Suggest remedies", annotations=READ_ONLY)
    @tool_errors
    async def suggest_remedies(trace_id: TraceId, ctx: Context[Any]) -> RemediesView:
        """What to do about each detected cause, with the speedup a what-if run of the fix predicts."""
        L = lens()
        relay = ProgressRelay(ctx)
        view: RemediesView = await memoised(
            ("view:remedies", trace_id), lambda: remedies_view(trace_id, L.diagnosis(trace_id, relay))
        )
        return view

    @mcp.resource("trace://{trace_id}/diagnosis", mime_type="application/json", title="Stored diagnosis")
    async def diagnosis_resource(trace_id: str) -> str:
        """The full diagnosis of a stored trace (computed on first read, then cached)."""
        return await stored_document(trace_id, "diagnosis")
