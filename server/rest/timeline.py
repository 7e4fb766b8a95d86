"""REST routes of the timelines: ``GET /api/traces/{id}/timeline.json[?steps=N,N]`` (the Chrome
trace-event document) and the ``include=timeline`` option of ``GET /api/traces/{id}/whatif``."""

from __future__ import annotations

import anyio
from starlette.requests import Request
from starlette.responses import Response

from server.core.timeline import parse_include, parse_steps, timeline_json, whatif_with


async def get_timeline(request: Request) -> Response:
    """The timeline of the chosen steps (default: the worst and a typical one), as a download."""
    lens = request.app.state.lens
    tid = request.path_params["trace_id"]
    steps = parse_steps(request.query_params.get("steps"))
    body = await anyio.to_thread.run_sync(timeline_json, lens, tid, steps)
    return Response(
        body,
        media_type="application/json",
        headers={"Content-Disposition": f'attachment; filename="timeline-{tid}.json"'},
    )


async def get_whatif_included(request: Request) -> Response:
    """The what-if report plus the ``include``d extras (``timeline``: critical paths and breakdown)."""
    lens = request.app.state.lens
    tid = request.path_params["trace_id"]
    include = parse_include(request.query_params.get("include"))
    body = await anyio.to_thread.run_sync(whatif_with, lens, tid, include)
    return Response(body, media_type="application/json")
