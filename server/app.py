"""The app factory: one Starlette app with MCP at ``/mcp``, REST under ``/api`` and ``/healthz``.

``create_app(settings)`` wires the pieces; one lifespan opens the store and the incident library
(``open_lens``) and runs the MCP session manager (a mounted MCP app's own lifespan never runs,
MCP-SDK.md §1.10); the web pages (``server.web``) sit beside them. ``SecurityMiddleware`` wraps
everything, so Host/Origin checks and the bearer token cover every route, not only ``/mcp``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from server.chat import commands as chat
from server.core.errors import ApiError, error_response
from server.core.monitor import start_monitor
from server.core.runtime import LensHolder, app_version, log, open_lens
from server.core.security import HostPolicy, SecurityMiddleware
from server.core.settings import Settings
from server.mcp.tools import build_mcp
from server.rest import jobs as rest_jobs
from server.rest import routes as rest
from server.web import pages as web
from server.web.app_view import app_html

# Request-body cap of /mcp: an inline upload of 1 MiB grows by 4/3 in base64, plus JSON framing.
MCP_BODY_LIMIT = 2 * 1024 * 1024


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return exc.response()


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    message = exc.detail if exc.status_code != 404 else f"no route {request.url.path}"
    return error_response(exc.status_code, code, str(message), dict(exc.headers or {}))


async def _crash(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(500, "internal_error", "internal error; the server log has the traceback")


def create_app(settings: Settings) -> Starlette:
    """Build the whole server. Each call builds a fresh MCP server (a session manager runs once)."""
    holder = LensHolder()
    mcp = build_mcp(settings, holder, app_html=app_html())
    mcp_app = mcp.streamable_http_app(
        streamable_http_path="/mcp",
        json_response=False,  # keep SSE: progress notifications need it
        max_request_body_size=MCP_BODY_LIMIT,
        transport_security=HostPolicy(settings).transport_security(),
    )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with open_lens(settings) as lens:
            holder.lens = lens
            app.state.lens = lens
            # the monitoring service: window assembly, background analysis, alert delivery
            app.state.monitor = holder.monitor = monitor = start_monitor(lens)
            try:
                async with anyio.create_task_group() as tg, mcp.session_manager.run():
                    tg.start_soon(monitor.run)
                    yield
                    tg.cancel_scope.cancel()
            finally:
                holder.lens = holder.monitor = None

    app = Starlette(
        routes=[
            *rest.routes(),
            *rest_jobs.routes(),
            *chat.routes(),
            Route("/mcp", endpoint=mcp_app),
            *web.routes(),
        ],
        middleware=[Middleware(SecurityMiddleware, settings=settings)],
        exception_handlers={ApiError: _api_error, HTTPException: _http_error, Exception: _crash},
        lifespan=lifespan,
    )
    app.state.version = app_version()
    app.state.mcp = mcp
    return app
