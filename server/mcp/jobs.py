"""MCP tools of the monitoring service: jobs, windows, comparisons and alerts.

The same bounded views as the REST routes (``server.core.jobs_api``). They need the running server's
monitor; an MCP server running on its own (the SDK's in-process client) answers with a tool
error saying so.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Annotated, Any

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from server.core import jobs_api
from server.core.jobs_api import AlertDetail, AlertList, Comparison, JobDetail, JobList, WindowDetail
from server.mcp.shared import NULL_IS_EMPTY, READ_ONLY, Limit, Offset, tool_errors

JobName = Annotated[
    str, Field(description="job name, as the training job reports it", min_length=1, max_length=128)
]
WindowId = Annotated[str, Field(description="window id (see get_job)", min_length=1, max_length=128)]


def register_job_tools(mcp: MCPServer[Any], monitor: Callable[[], Any]) -> None:
    async def run(fn: Callable[..., Any], *args: Any) -> Any:
        m = monitor()
        if m is None:
            raise ToolError("the monitoring service is not running on this server (start it with `serve`)")
        return await anyio.to_thread.run_sync(functools.partial(fn, m, *args))

    @mcp.tool(title="List monitored jobs", annotations=READ_ONLY)
    @tool_errors
    async def list_jobs(
        limit: Limit = 20,
        offset: Offset = 0,
        pattern: Annotated[
            str, NULL_IS_EMPTY, Field(description="glob on the job name, e.g. 'llama-*'; empty: all")
        ] = "",
    ) -> JobList:
        """Jobs that stream profiling windows, most recently updated first, with their latest
        window's status, slowdown S and causes."""
        result: JobList = await run(jobs_api.list_jobs, limit, offset, pattern or None)
        return result

    @mcp.tool(title="A job's history", annotations=READ_ONLY)
    @tool_errors
    async def get_job(job: JobName, limit: Limit = 20) -> JobDetail:
        """A job's windows, newest first (status, S, wasted fraction, causes, fidelity), and the
        trend over them: rank correlation of S with time, per-cause counts, growing causes."""
        result: JobDetail = await run(jobs_api.get_job, job, limit)
        return result

    @mcp.tool(title="A profiling window", annotations=READ_ONLY)
    @tool_errors
    async def get_window(job: JobName, window: WindowId) -> WindowDetail:
        """One window: its status (receiving | analysing | done | failed, with the reason), the
        ranks that arrived or are missing, and once analysed the summary of its diagnosis. Its
        trace_id works with every trace tool (diagnose, get_heatmap, run_whatif)."""
        result: WindowDetail = await run(jobs_api.get_window, job, window)
        return result

    @mcp.tool(title="Compare two windows", annotations=READ_ONLY)
    @tool_errors
    async def compare_windows(job: JobName, before: WindowId, after: WindowId) -> Comparison:
        """Did the fix help? S before and after, each cause appeared / gone / stayed, the
        per-worker slowdown change, and the remedy 'before' predicted versus what happened."""
        result: Comparison = await run(jobs_api.compare_windows, job, before, after)
        return result

    @mcp.tool(title="List alerts", annotations=READ_ONLY)
    @tool_errors
    async def list_alerts(
        job: Annotated[
            str, NULL_IS_EMPTY, Field(description="only this job's alerts; empty: all", max_length=128)
        ] = "",
        limit: Limit = 20,
        offset: Offset = 0,
    ) -> AlertList:
        """Alerts raised by the --alerts rules, newest first, with each destination's delivery state."""
        result: AlertList = await run(jobs_api.list_alerts, job or None, limit, offset)
        return result

    @mcp.tool(title="An alert and its delivery log", annotations=READ_ONLY)
    @tool_errors
    async def get_alert(
        alert_id: Annotated[str, Field(description="alert id from list_alerts", min_length=1, max_length=64)],
    ) -> AlertDetail:
        """One alert: the rule, job, window and cause, the payload sent, and every delivery try."""
        result: AlertDetail = await run(jobs_api.get_alert, alert_id)
        return result
