"""The web pages: trace list and upload, trace page, incident search and pages, login.

Routes validate, call the core in a worker thread, and render a template; a caller's error
(unknown trace, bad query) becomes the same page layout with the core's message and its status.
Pages are left out of the OpenAPI document (that describes ``/api`` only).
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import anyio
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from server.core import overview
from server.core.errors import ApiError
from server.core.security import SESSION_COOKIE, session_cookie
from server.core.service import Lens
from server.web.render import PAGE_HEADERS, STATIC, render

Handler = Callable[[Request], Awaitable[Response]]
CASE_FILTERS = ("category", "cause", "tag", "topic", "org")


def lens_of(request: Request) -> Lens:
    lens: Lens = request.app.state.lens
    return lens


def page(name: str, request: Request, status: int = 200, **context: Any) -> HTMLResponse:
    lens = lens_of(request)
    body = render(
        name,
        request=request,
        secured=lens.settings.token is not None,
        version=request.app.state.version,
        **context,
    )
    return HTMLResponse(body, status_code=status, headers=PAGE_HEADERS)


def guarded(fn: Handler) -> Handler:
    """Render an ``ApiError`` as the error page with its status (never a 5xx for bad input)."""

    async def inner(request: Request) -> Response:
        try:
            return await fn(request)
        except ApiError as exc:
            return page("error.html", request, status=exc.status, error=exc)

    inner.__name__ = fn.__name__
    return inner


def has_route(request: Request, path: str) -> bool:
    """Whether the app serves ``path`` (a route another surface may add, e.g. the timeline)."""
    return any(getattr(r, "path", None) == path for r in request.app.routes)


@guarded
async def index(request: Request) -> Response:
    lens = lens_of(request)
    q = (request.query_params.get("q") or "").strip()[:200]
    total, rows = await anyio.to_thread.run_sync(overview.trace_rows, lens, q or None)
    jobs = await anyio.to_thread.run_sync(overview.job_rows, getattr(request.app.state, "monitor", None))
    return page(
        "index.html",
        request,
        q=q,
        total=total,
        rows=rows,
        jobs=jobs,
        max_upload=lens.settings.max_upload_bytes,
    )


@guarded
async def trace_page(request: Request) -> Response:
    lens = lens_of(request)
    tid = request.path_params["trace_id"]
    view = await anyio.to_thread.run_sync(overview.trace_view, lens, tid)
    data = {
        "trace_id": tid,
        "heatmap": view["heatmap"].model_dump(mode="json"),
        "detail": view["detail"].model_dump(mode="json"),
        "step_series": view["step_series"],
    }
    timeline = f"/api/traces/{tid}/timeline.json"
    return page(
        "trace.html",
        request,
        view=view,
        d=view["diagnosis"],
        data=data,
        timeline=timeline if has_route(request, "/api/traces/{trace_id}/timeline.json") else None,
    )


def library(request: Request) -> Any:
    lib = lens_of(request).library
    if lib is None:
        raise ApiError(503, "no_library", "the incident library is not installed on this server")
    return lib


@guarded
async def incidents_page(request: Request) -> Response:
    from server.core.incident_glue import search_or_list

    lib = library(request)
    q = (request.query_params.get("q") or "").strip()[:200]
    filters: dict[str, Any] = {k: request.query_params.get(k) or None for k in CASE_FILTERS}
    filters |= {"year_from": None, "year_to": None}
    result = await anyio.to_thread.run_sync(search_or_list, lib, q or None, filters, 50, 0)
    return page("incidents.html", request, q=q, filters=filters, result=result)


@guarded
async def incident_page(request: Request) -> Response:
    from incidents.search import get_incident
    from server.core.incident_glue import call

    lib = library(request)
    case_id = request.path_params["case_id"]
    case = await anyio.to_thread.run_sync(lambda: call(get_incident, case_id, library=lib))
    return page("incident.html", request, case=case)


def safe_next(raw: str | None) -> str:
    """A local path to return to after login (never another site)."""
    if not raw or not raw.startswith("/") or raw.startswith("//") or "\\" in raw:
        return "/"
    parts = urlsplit(raw)
    return "/" if parts.scheme or parts.netloc else raw


async def login_form(request: Request) -> Response:
    if lens_of(request).settings.token is None:
        return RedirectResponse("/", status_code=303)
    return page("login.html", request, next=safe_next(request.query_params.get("next")), error=None)


async def login(request: Request) -> Response:
    """Check the token from the form and set the session cookie; the token never goes in a URL."""
    token = lens_of(request).settings.token
    if token is None:
        return RedirectResponse("/", status_code=303)
    form = await request.form()
    given = str(form.get("token") or "")
    target = safe_next(str(form.get("next") or "/"))
    if not hmac.compare_digest(given.strip().encode(), token.encode()):
        return page("login.html", request, status=401, next=target, error="wrong token")
    resp = RedirectResponse(target, status_code=303)
    resp.headers.append("Set-Cookie", session_cookie(token, secure=request.url.scheme == "https"))
    return resp


async def logout(request: Request) -> Response:
    resp = RedirectResponse("/login", status_code=303)
    resp.headers.append("Set-Cookie", f"{SESSION_COOKIE}=; Max-Age=0; HttpOnly; SameSite=Strict; Path=/")
    return resp


class Static(StaticFiles):
    """The pages' CSS and JavaScript, with the pages' security headers."""

    async def get_response(self, path: str, scope: Any) -> Response:
        resp = await super().get_response(path, scope)
        resp.headers["X-Content-Type-Options"] = "nosniff"
        return resp


def routes() -> list[BaseRoute]:
    return [
        Route("/", index, methods=["GET"], include_in_schema=False),
        Route("/traces/{trace_id}", trace_page, methods=["GET"], include_in_schema=False),
        Route("/incidents", incidents_page, methods=["GET"], include_in_schema=False),
        Route("/incidents/{case_id}", incident_page, methods=["GET"], include_in_schema=False),
        Route("/login", login_form, methods=["GET"], include_in_schema=False),
        Route("/login", login, methods=["POST"], include_in_schema=False),
        Route("/logout", logout, methods=["POST"], include_in_schema=False),
        Mount("/static", app=Static(directory=str(STATIC)), name="static"),
    ]
