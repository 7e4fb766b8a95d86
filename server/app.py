"""The app factory: one Starlette app with MCP at ``/mcp``, REST under ``/api`` and ``/healthz``.

``create_app(settings)`` wires the pieces; one lifespan opens the store and the incident library
(``open_lens``) and runs the MCP session manager (a mounted MCP app's own lifespan never runs,
MCP-SDK.md §1.10). ``SecurityMiddleware`` wraps everything, so Host/Origin checks and the bearer
token cover every route, not only ``/mcp``.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from server.errors import ApiError, error_response
from server.security import HostPolicy, SecurityMiddleware
from server.service import Lens
from server.settings import Settings
from server.store import Store

log = logging.getLogger("straggler_lens.server")


# Request-body cap of /mcp: an inline upload of 1 MiB grows by 4/3 in base64, plus JSON framing.
MCP_BODY_LIMIT = 2 * 1024 * 1024


def app_version() -> str:
    try:
        return version("straggler-lens")
    except PackageNotFoundError:
        return "0.0.0"


def features() -> dict[str, bool]:
    """Which optional pieces are installed (tools whose module is missing are not offered)."""

    def has(mod: str) -> bool:
        try:
            return importlib.util.find_spec(mod) is not None
        except ModuleNotFoundError:
            return False

    return {
        "whatif": has("diagnosers.whatif"),
        "diagnose": has("diagnosers.diagnose"),
        "heatmap": has("diagnosers.render"),
        "incidents": has("incidents.search") and has("incidents.library"),
        "similar": has("incidents.similar"),
    }


def open_library() -> Any:
    """The incident library, or None when the incidents package is not installed."""
    try:
        import incidents.library  # noqa: F401
    except ModuleNotFoundError:
        return None
    from incidents.library import load_library

    library = load_library()
    _ = library.index  # build the search index now rather than on the first query
    return library


def preload_sample(lens: Lens) -> str:
    """Store the bundled ST sample (idempotent: the content hash finds it on later starts)."""
    from diagnosers.samples import artifact_trace
    from server.ingest import UploadBudget, write_bytes

    trace = artifact_trace("ST")
    paths = [trace, trace.with_name("meta-ST.yaml")]
    staging = lens.store.staging_dir()
    budget = UploadBudget(lens.settings.max_upload_bytes, lens.settings.max_decompressed_bytes)
    files = [write_bytes(staging, p.name, p.read_bytes(), budget) for p in paths]
    result = lens.ingest(staging, files, {}, "sample ST (pipeline stage imbalance)")
    return result.trace_id


@asynccontextmanager
async def open_lens(settings: Settings) -> AsyncIterator[Lens]:
    """Open the store and the incident library; close the store on the way out."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    store = await anyio.to_thread.run_sync(Store(settings.data_dir).open)
    try:
        library = await anyio.to_thread.run_sync(open_library)
        lens = Lens(settings, store, library)
        if settings.preload_sample:
            tid = await anyio.to_thread.run_sync(preload_sample, lens)
            log.info("sample trace ST stored as %s", tid)
        yield lens
    finally:
        store.close()


class LensHolder:
    """Where the lifespan puts the running ``Lens`` for the MCP tools (built before it opens)."""

    def __init__(self) -> None:
        self.lens: Lens | None = None
        self.monitor: Any = None

    def require(self) -> Lens:
        if self.lens is None:
            raise RuntimeError("the server is not running (lifespan not entered)")
        return self.lens


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
    from server import chat_commands, rest, rest_jobs
    from server.mcp_tools import build_mcp
    from server.monitor import start_monitor

    holder = LensHolder()
    mcp = build_mcp(settings, holder)
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
            *chat_commands.routes(),
            Route("/mcp", endpoint=mcp_app),
        ],
        middleware=[Middleware(SecurityMiddleware, settings=settings)],
        exception_handlers={ApiError: _api_error, HTTPException: _http_error, Exception: _crash},
        lifespan=lifespan,
    )
    app.state.version = app_version()
    app.state.mcp = mcp
    return app
