"""The MCP ``get_fleet_report`` tool: a stored fleet report (``straggler-lens fleet -o DIR``, served
with ``--fleet-dir DIR``) by name, or the list of stored ones. Reads files only."""

from __future__ import annotations

from typing import Annotated, Any

import anyio
from mcp.server import MCPServer
from pydantic import Field

from server.core.fleet_reports import FleetReportList, StoredFleetReport, list_reports, load_report
from server.mcp.shared import NULL_IS_EMPTY, READ_ONLY, LensFn, tool_errors

# An answer stays bounded: a fleet with thousands of failed jobs lists the first ones (REST has all).
MAX_LISTED = 50

ReportName = Annotated[
    str,
    NULL_IS_EMPTY,
    Field(description="report name (its folder's name); empty when only one is stored", max_length=200),
]


def register_fleet_tools(mcp: MCPServer[Any], lens: LensFn) -> None:
    @mcp.tool(title="Read a fleet report", annotations=READ_ONLY)
    @tool_errors
    async def get_fleet_report(name: ReportName = "") -> StoredFleetReport:
        """The fleet study's statistics over many jobs (written by `straggler-lens fleet`): share of
        straggling jobs (S >= 1.1), share of GPU-hours wasted, S and wasted-fraction quantiles and
        CDFs, the cause mix with each cause's mean slowdown, how often fixing the slowest 3% of
        workers removes most of the slowdown, per-step spread over S, the size correlation, failed
        and unreliable jobs (counted apart). Call list_fleet_reports for the names."""
        settings = lens().settings
        stored = await anyio.to_thread.run_sync(load_report, settings, name or None)
        return bounded(stored)

    @mcp.tool(title="List fleet reports", annotations=READ_ONLY)
    @tool_errors
    async def list_fleet_reports() -> FleetReportList:
        """The stored fleet reports this server can read (name, folder, job count)."""
        settings = lens().settings
        return await anyio.to_thread.run_sync(list_reports, settings)


def bounded(stored: StoredFleetReport) -> StoredFleetReport:
    """The report with at most ``MAX_LISTED`` failed and unreliable job ids, saying when it cut."""
    rep = stored.report
    notes = list(rep.notes)
    failures, unreliable = rep.failures, rep.unreliable_jobs
    if len(failures) > MAX_LISTED:
        failures = dict(list(failures.items())[:MAX_LISTED])
        notes.append(f"{len(rep.failures)} failed jobs, the first {MAX_LISTED} listed; "
                     f"GET /api/fleet/{stored.name} has all")
    if len(unreliable) > MAX_LISTED:
        unreliable = unreliable[:MAX_LISTED]
        notes.append(f"{len(rep.unreliable_jobs)} unreliable jobs, the first {MAX_LISTED} listed")
    if failures is rep.failures and unreliable is rep.unreliable_jobs:
        return stored
    report = rep.model_copy(update={"failures": failures, "unreliable_jobs": unreliable, "notes": notes})
    return stored.model_copy(update={"report": report})
