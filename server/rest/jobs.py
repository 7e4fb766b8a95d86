"""REST routes of the monitoring service: live ingestion, jobs and windows, comparisons, alerts.

| route | |
|---|---|
| ``PUT /api/jobs/{job}/windows/{window}/ranks/{rank}`` | one rank's trace, gzip or plain |
| (query: ``world_size=&format=&filename=``) | |
| ``GET /api/jobs?limit=&offset=&q=`` | jobs, most recently updated first (``q``: glob) |
| ``GET /api/jobs/{job}?limit=`` | the job's windows (newest first) and trend |
| ``GET /api/jobs/{job}/windows/{window}`` | a window's status and summary |
| ``GET /api/jobs/{job}/windows/{window}/diagnosis.md`` | its chat rendering (Markdown) |
| ``GET /api/jobs/{job}/compare?before=&after=`` | compare two windows |
| ``GET /api/traces/{trace_id}/diagnosis.md`` | a stored trace's diagnosis as Markdown |
| ``GET /api/alerts?job=&limit=&offset=``, ``GET /api/alerts/{id}`` | alerts; one with its delivery log |
"""

from __future__ import annotations

from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from server.core import jobs_api
from server.core.chat_render import render_markdown
from server.core.errors import ApiError
from server.core.history import window_summary
from server.core.uploads import body_chunks
from server.rest.routes import int_param, lens_of, page, str_param


def monitor_of(request: Request) -> Any:
    monitor = getattr(request.app.state, "monitor", None)
    if monitor is None:
        raise ApiError(503, "no_monitor", "the monitoring service is not running on this server")
    return monitor


def _json(model: Any, status: int = 200) -> Response:
    body = model.model_dump(mode="json") if hasattr(model, "model_dump") else model
    return JSONResponse(body, status_code=status)


async def put_rank(request: Request) -> Response:
    """Receive one rank's file of a profiling window (the ingestion client's upload)."""
    monitor = monitor_of(request)
    p = request.path_params
    try:
        rank = int(p["rank"])
    except ValueError:
        raise ApiError(400, "bad_parameter", f"rank {p['rank']!r} is not an integer") from None
    world = int_param(request, "world_size", None, 1, 65536)
    arrival = await monitor.receive_rank(
        p["job"],
        p["window"],
        rank,
        body_chunks(request),
        filename=str_param(request, "filename", 255),
        world_size=world,
        fmt=str_param(request, "format", 40),
    )
    info = jobs_api.window_info(arrival.window)
    body = {
        "created": arrival.created,
        "assembled": arrival.assembled,
        "window": info.model_dump(mode="json"),
    }
    return JSONResponse(body, status_code=201 if arrival.created else 200)


async def list_jobs(request: Request) -> Response:
    monitor = monitor_of(request)
    limit, offset = page(request)
    q = str_param(request, "q", 128)
    return _json(await anyio.to_thread.run_sync(lambda: jobs_api.list_jobs(monitor, limit, offset, q)))


async def get_job(request: Request) -> Response:
    monitor = monitor_of(request)
    limit = int_param(request, "limit", 20, 1, jobs_api.MAX_WINDOWS) or 20
    job = request.path_params["job"]
    return _json(await anyio.to_thread.run_sync(lambda: jobs_api.get_job(monitor, job, limit)))


async def get_window(request: Request) -> Response:
    monitor = monitor_of(request)
    p = request.path_params
    return _json(await anyio.to_thread.run_sync(lambda: jobs_api.get_window(monitor, p["job"], p["window"])))


async def window_markdown(request: Request) -> Response:
    monitor = monitor_of(request)
    p = request.path_params
    w = await anyio.to_thread.run_sync(lambda: jobs_api.get_window(monitor, p["job"], p["window"]))
    if w.status != "done" or not w.summary:
        raise ApiError(409, "window_not_analysed", f"window {w.window!r} is {w.status}; no diagnosis yet")
    md = render_markdown(w.summary, f"{w.job} / window {w.window}", monitor.job_link(w.job))
    return Response(md, media_type="text/markdown; charset=utf-8")


async def trace_markdown(request: Request) -> Response:
    lens = lens_of(request)
    tid = request.path_params["trace_id"]
    diagnosis = await anyio.to_thread.run_sync(lens.diagnosis, tid)
    md = render_markdown(window_summary(diagnosis), f"trace {tid}")
    return Response(md, media_type="text/markdown; charset=utf-8")


async def compare(request: Request) -> Response:
    monitor = monitor_of(request)
    job = request.path_params["job"]
    before, after = request.query_params.get("before"), request.query_params.get("after")
    if not before or not after:
        raise ApiError(400, "bad_parameter", "compare needs ?before=<window>&after=<window>")
    return _json(
        await anyio.to_thread.run_sync(lambda: jobs_api.compare_windows(monitor, job, before, after))
    )


async def list_alerts(request: Request) -> Response:
    monitor = monitor_of(request)
    limit, offset = page(request)
    job = request.query_params.get("job") or None
    return _json(await anyio.to_thread.run_sync(lambda: jobs_api.list_alerts(monitor, job, limit, offset)))


async def get_alert(request: Request) -> Response:
    monitor = monitor_of(request)
    aid = request.path_params["alert_id"]
    return _json(await anyio.to_thread.run_sync(lambda: jobs_api.get_alert(monitor, aid)))


def routes() -> list[BaseRoute]:
    return [
        Route("/api/jobs/{job}/windows/{window}/ranks/{rank}", put_rank, methods=["PUT", "POST"]),
        Route("/api/jobs", list_jobs, methods=["GET"]),
        Route("/api/jobs/{job}", get_job, methods=["GET"]),
        Route("/api/jobs/{job}/compare", compare, methods=["GET"]),
        Route("/api/jobs/{job}/windows/{window}", get_window, methods=["GET"]),
        Route("/api/jobs/{job}/windows/{window}/diagnosis.md", window_markdown, methods=["GET"]),
        Route("/api/traces/{trace_id}/diagnosis.md", trace_markdown, methods=["GET"]),
        Route("/api/alerts", list_alerts, methods=["GET"]),
        Route("/api/alerts/{alert_id}", get_alert, methods=["GET"]),
    ]
