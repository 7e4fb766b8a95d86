"""Every MCP tool called on one stored sample, with the size of its answer (shared by the budget
test and the table in docs/SERVER.md: ``python tests/server/budget_calls.py`` prints it)."""

from __future__ import annotations

import json
from typing import Any

from mcp import Client

# tool -> (arguments beyond trace_id, whether it takes the trace_id)
# tool -> (text bytes, structured-content bytes) it may answer on the study's samples; the PNG of
# get_heatmap is bounded apart (IMAGE_BUDGET). docs/SERVER.md lists these with measured sizes.
BUDGETS: dict[str, tuple[int, int]] = {
    "describe_trace": (3_000, 2_000),
    "list_traces": (40_000, 25_000),  # a full default page (20 traces of ~2 kB)
    "run_whatif": (16_000, 24_000),
    "run_whatif (scenario)": (16_000, 28_000),
    "get_heatmap": (2_000, 4_000),
    "diagnose": (20_000, 26_000),
    "classify_patterns": (12_000, 8_000),
    "suggest_remedies": (4_000, 4_000),
    "similar_incidents": (8_000, 6_000),
    "search_incidents": (12_000, 9_000),
    "list_incidents": (16_000, 12_000),
    "get_incident": (10_000, 8_000),
    "get_topic": (16_000, 12_000),
    "vocab": (10_000, 10_000),
    "export_timeline": (3_000, 3_000),
    # measured where a job, its alerts or a fleet report exist (MEASURED_ELSEWHERE)
    "list_jobs": (12_000, 10_000),  # a full default page of 20 jobs
    "get_job": (12_000, 10_000),  # a full default page of 20 windows
    "get_window": (8_000, 8_000),
    "compare_windows": (4_000, 4_000),
    "list_alerts": (16_000, 16_000),  # a full default page of 20 alerts
    "get_alert": (10_000, 8_000),  # the summary and each destination's delivery log
    "list_fleet_reports": (8_000, 8_000),
    "get_fleet_report": (16_000, 20_000),  # at most 50 failed jobs listed
}
# tool -> the test that measures it against BUDGETS on a live job, its alerts or stored fleet reports
MEASURED_ELSEWHERE: dict[str, str] = {
    "list_jobs": "tests/service/test_alerts_live.py",
    "get_job": "tests/service/test_alerts_live.py",
    "get_window": "tests/service/test_alerts_live.py",
    "compare_windows": "tests/service/test_alerts_live.py",
    "list_alerts": "tests/service/test_alerts_live.py",
    "get_alert": "tests/service/test_alerts_live.py",
    "list_fleet_reports": "tests/server/test_server_fleet.py",
    "get_fleet_report": "tests/server/test_server_fleet.py",
}
IMAGE_BUDGET = 200_000  # base64 PNG characters

CALLS: list[tuple[str, dict[str, Any], bool]] = [
    ("describe_trace", {}, True),
    ("list_traces", {}, False),
    ("run_whatif", {}, True),
    ("run_whatif", {"dp_ranks": [0]}, True),
    ("get_heatmap", {}, True),
    ("diagnose", {}, True),
    ("classify_patterns", {}, True),
    ("suggest_remedies", {}, True),
    ("similar_incidents", {}, True),
    ("search_incidents", {"query": "last pipeline stage slow"}, False),
    ("list_incidents", {}, False),
    ("get_incident", {"id": "IL-0417"}, False),
    ("get_topic", {"name": "stragglers"}, False),
    ("vocab", {}, False),
    ("export_timeline", {}, True),
]


def over_budget(label: str, result: Any) -> str | None:
    """Why an answer breaks its budget (None when it keeps it, or the call failed loudly)."""
    if result.is_error:
        return f"{label}: {result.content[0].text}"
    text, structured, _ = sizes(result)
    budget = BUDGETS[label]
    if text > budget[0] or structured > budget[1]:
        return f"{label}: {text:,} / {structured:,} bytes over its budget {budget[0]:,} / {budget[1]:,}"
    return None


def sizes(result: Any) -> tuple[int, int, int]:
    """(text bytes, structured-content bytes, image bytes) of a tool answer."""
    text = sum(len(c.text.encode()) for c in result.content if c.type == "text")
    image = sum(len(c.data) for c in result.content if c.type == "image")
    structured = len(json.dumps(result.structured_content)) if result.structured_content else 0
    return text, structured, image


async def measure(c: Client, trace_id: str) -> dict[str, tuple[int, int, int]]:
    out: dict[str, tuple[int, int, int]] = {}
    for tool, args, with_trace in CALLS:
        label = tool + (" (scenario)" if tool == "run_whatif" and args else "")
        r = await c.call_tool(tool, {**({"trace_id": trace_id} if with_trace else {}), **args})
        if r.is_error:
            raise AssertionError(f"{label}: {r.content[0].text}")
        out[label] = sizes(r)
    return out


if __name__ == "__main__":
    import tempfile
    from pathlib import Path

    import anyio

    from diagnosers.samples import artifact_trace
    from server.core.runtime import LensHolder
    from server.core.settings import Settings
    from server.mcp.tools import build_mcp

    async def main() -> None:
        folder = artifact_trace("ST").parent.resolve()
        settings = Settings(data_dir=Path(tempfile.mkdtemp()), allow_dirs=(folder,), workers=0)
        rows: dict[str, dict[str, tuple[int, int, int]]] = {}
        async with Client(build_mcp(settings, LensHolder())) as c:
            for name in ("ST", "AR", "SE"):
                up = await c.call_tool("upload_trace", {"path": f"trace-{name}.parquet"})
                rows[name] = await measure(c, up.structured_content["trace_id"])
        for label in rows["ST"]:
            cells = " | ".join(
                f"{rows[n][label][0]:,} / {rows[n][label][1]:,}"
                + (f" + {rows[n][label][2]:,} PNG" if rows[n][label][2] else "")
                for n in rows
            )
            text, structured = BUDGETS[label]
            print(f"| `{label}` | {cells} | {text:,} / {structured:,} |")

    anyio.run(main)
