"""REST routes under ``/api`` plus ``/healthz``: validate, call ``Lens``, wrap as JSON.

Every error leaves as the one shape of ``server.core.errors`` (``{"error": {status, code, message}}``).
The OpenAPI document is built in ``server.rest.openapi`` from the same models.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from server.core.errors import ApiError
from server.core.models import DeleteResult, Health, TraceList
from server.core.runtime import features
from server.core.service import Lens
from server.core.staging import UploadBudget
from server.core.uploads import receive_upload
from server.core.wording import in_terms
from server.rest.timeline import get_timeline

MAX_PAGE = 100
MAX_SIZE = 1_000_000  # parallel sizes, as the MCP tool's bound


def lens_of(request: Request) -> Lens:
    lens: Lens = request.app.state.lens
    return lens


def int_param(
    request: Request, name: str, default: int | None, lo: int = 0, hi: int | None = None
) -> int | None:
    """An integer query parameter within [lo, hi], or a 400 naming the parameter."""
    raw = request.query_params.get(name)
    if raw is None:
        return default
    value = _whole(name, raw)
    hi = 2**62 if hi is None else hi  # beyond an int64 column (SQLite, numpy): OverflowError
    if value < lo or value > hi:
        raise ApiError(400, "bad_parameter", f"{name}={value} must be between {lo} and {hi}")
    return value


def _whole(name: str, raw: str) -> int:
    """An integer query value; a whole decimal (``3.0``, ``1e2``) counts, as JSON Schema's
    ``integer`` admits it; empty or anything else is a 400 naming the parameter."""
    try:
        return int(raw)
    except ValueError:
        pass
    try:
        number = float(raw)
    except ValueError:
        number = float("nan")
    if number.is_integer() and abs(number) < 2**63:
        return int(number)
    raise ApiError(400, "bad_parameter", f"{name}={raw!r} is not a whole number")


def str_param(request: Request, name: str, most: int) -> str | None:
    """A string query parameter of at most ``most`` characters; empty = not given."""
    raw = request.query_params.get(name)
    if raw is not None and len(raw) > most:
        raise ApiError(400, "bad_parameter", f"{name} must be at most {most} characters, got {len(raw)}")
    return raw or None


def page(request: Request, default_limit: int = 20) -> tuple[int, int]:
    limit = int_param(request, "limit", default_limit, 1, MAX_PAGE)
    offset = int_param(request, "offset", 0, 0)
    assert limit is not None and offset is not None
    return limit, offset


def upload_options(fields: dict[str, str]) -> dict[str, Any]:
    """The read options of an upload: ``format``, the positive sizes ``dp, pp, tp, cp, vpp,
    gpus_per_host``, ``layers_per_stage`` (comma-separated positive integers) and ``partial``
    (``true`` / ``false``): the CLI's reading options under their argument names."""
    out: dict[str, Any] = {}
    for key, most in (("format", 40), ("filename", 255)):
        if len(fields.get(key) or "") > most:
            raise ApiError(400, "bad_parameter", f"{key} must be at most {most} characters")
    if fields.get("format"):
        out["format"] = fields["format"]
    for key in ("dp", "pp", "tp", "cp", "vpp", "gpus_per_host"):
        raw = fields.get(key)
        if raw:
            out[key] = _positive(key, raw)
    raw = fields.get("layers_per_stage")
    if raw:
        out["layers_per_stage"] = [_positive("layers_per_stage", x) for x in raw.split(",")]
    raw = (fields.get("partial") or "").lower()
    if raw not in ("", "true", "false", "1", "0"):
        raise ApiError(400, "bad_parameter", f"partial={fields['partial']!r} must be true or false")
    if raw in ("true", "1"):
        out["partial"] = True
    return out


def _positive(key: str, raw: str) -> int:
    value = _whole(key, raw.strip())
    if not 1 <= value <= 1_000_000:
        raise ApiError(400, "bad_parameter", f"{key}={raw} must be between 1 and 1000000")
    return value


async def healthz(request: Request) -> Response:
    lens = lens_of(request)
    total, _ = await anyio.to_thread.run_sync(lens.store.page, 1, 0)
    body = Health(
        status="ok",
        version=request.app.state.version,
        traces=total,
        incidents=lens.incident_count(),
        features=features(),
        executor=lens.executor.status() if lens.executor is not None else None,
    )
    return JSONResponse(body.model_dump())


async def post_trace(request: Request) -> Response:
    """Upload one job's trace files: multipart parts named ``files`` or a raw body."""
    lens = lens_of(request)
    settings = lens.settings
    budget = UploadBudget(settings.max_upload_bytes, settings.max_decompressed_bytes)
    # one mkdir on the loop: no await between creating the folder and guarding it, so a
    # cancelled request cannot leak it
    staging = lens.store.staging_dir()
    try:
        files, fields = await receive_upload(request, staging, budget, settings.upload_deadline_s)
        options = upload_options(fields)
    except BaseException:
        lens.store.discard(staging)
        raise
    name = fields.get("filename") or ", ".join(sorted(f.name for f in files))[:200]
    try:
        result = await anyio.to_thread.run_sync(lens.ingest, staging, files, options, name)
    except ApiError as exc:  # the readers word their errors for the CLI
        raise ApiError(exc.status, exc.code, in_terms(exc.message, "rest")) from exc
    return JSONResponse(result.model_dump(), status_code=201 if result.created else 200)


async def list_traces(request: Request) -> Response:
    lens = lens_of(request)
    limit, offset = page(request)

    def run() -> TraceList:
        total, recs = lens.store.page(limit, offset)
        items = [lens.info(r) for r in recs]
        return TraceList(
            total=total, limit=limit, offset=offset, truncated=offset + len(items) < total, items=items
        )

    return JSONResponse((await anyio.to_thread.run_sync(run)).model_dump())


async def get_trace(request: Request) -> Response:
    lens = lens_of(request)
    tid = request.path_params["trace_id"]
    return JSONResponse(lens.info(lens.record(tid)).model_dump())


async def delete_trace(request: Request) -> Response:
    """Delete a stored trace, its files and its cached results (guarded like uploads)."""
    lens = lens_of(request)
    tid = request.path_params["trace_id"]
    await anyio.to_thread.run_sync(lens.delete, tid)
    return JSONResponse(DeleteResult(trace_id=tid, deleted=True).model_dump())


async def result_document(request: Request, kind: str) -> Response:
    """The stored JSON document as is (hot documents come from memory, without a thread hop)."""
    lens = lens_of(request)
    tid = request.path_params["trace_id"]
    body = lens.peek("json", kind, tid)
    if body is None:
        body = await anyio.to_thread.run_sync(lens.result_json, kind, tid)
    return Response(body, media_type="application/json")


async def get_whatif(request: Request) -> Response:
    if request.query_params.get("include"):
        from server.rest.timeline import get_whatif_included

        return await get_whatif_included(request)
    return await result_document(request, "whatif")


async def get_diagnosis(request: Request) -> Response:
    return await result_document(request, "diagnosis")


async def get_heatmap_png(request: Request) -> Response:
    lens = lens_of(request)
    step = int_param(request, "step", None, lo=-(2**62))
    scale = request.query_params.get("scale") or "fixed"
    png, _, _ = await anyio.to_thread.run_sync(lens.heatmap, request.path_params["trace_id"], step, scale)
    return Response(png, media_type="image/png")


async def get_heatmap_json(request: Request) -> Response:
    """The heatmap as data: what the web page and the MCP App draw."""
    lens = lens_of(request)
    step = int_param(request, "step", None, lo=-(2**62))
    scale = request.query_params.get("scale") or "fixed"
    hm = await anyio.to_thread.run_sync(lens.heatmap_model, request.path_params["trace_id"], step, scale)
    return JSONResponse(hm.model_dump(mode="json"))


# -- incidents (mirrors the IL-0417 API) ----------------------------------------------------------

CASE_FILTERS = ("category", "cause", "tag", "topic", "org")


def library_of(request: Request) -> Any:
    lib = lens_of(request).library
    if lib is None:
        raise ApiError(503, "no_library", "the incident library is not installed on this server")
    return lib


async def list_cases(request: Request) -> Response:
    from server.core.incident_glue import search_or_list

    lib = library_of(request)
    limit, offset = page(request, default_limit=10)
    filters: dict[str, Any] = {k: str_param(request, k, 80) for k in CASE_FILTERS}
    filters["year_from"] = int_param(request, "year_from", None, 1990, 2100)
    filters["year_to"] = int_param(request, "year_to", None, 1990, 2100)
    q = str_param(request, "q", 500)
    result = await anyio.to_thread.run_sync(search_or_list, lib, q, filters, limit, offset)
    return JSONResponse(result.model_dump(mode="json"))


async def get_case(request: Request) -> Response:
    from incidents.search import get_incident
    from server.core.incident_glue import call

    lib = library_of(request)
    case = await anyio.to_thread.run_sync(
        lambda: call(get_incident, request.path_params["case_id"], library=lib)
    )
    return JSONResponse(case.model_dump(mode="json"))


async def similar_cases(request: Request) -> Response:
    from server.core.incident_glue import similar

    lens = lens_of(request)
    library_of(request)
    limit = int_param(request, "limit", 5, 1, 20) or 5
    result = await anyio.to_thread.run_sync(
        lambda: similar(lens, case_id=request.path_params["case_id"], trace_id=None, text=None, limit=limit)
    )
    return JSONResponse(result.model_dump(mode="json"))


async def get_topic(request: Request) -> Response:
    from incidents.search import get_topic as topic_of
    from server.core.incident_glue import call

    lib = library_of(request)
    topic = await anyio.to_thread.run_sync(lambda: call(topic_of, request.path_params["name"], library=lib))
    return JSONResponse(topic.model_dump(mode="json"))


async def get_vocab(request: Request) -> Response:
    from incidents.search import vocab
    from server.core.incident_glue import call

    lib = library_of(request)
    result = await anyio.to_thread.run_sync(lambda: call(vocab, library=lib))
    return JSONResponse(result.model_dump(mode="json"))


async def list_fleet(request: Request) -> Response:
    from server.core.fleet_reports import list_reports

    out = await anyio.to_thread.run_sync(list_reports, lens_of(request).settings)
    return JSONResponse(out.model_dump(mode="json"))


async def get_fleet(request: Request) -> Response:
    from server.core.fleet_reports import load_report

    name = request.path_params["name"]
    out = await anyio.to_thread.run_sync(load_report, lens_of(request).settings, name)
    return Response(out.model_dump_json(), media_type="application/json")


async def openapi(request: Request) -> Response:
    from server.rest.openapi import build_openapi

    base = str(request.base_url).rstrip("/") or "/"
    lens = lens_of(request)
    vocabulary = None
    if lens.library is not None:
        from incidents.search import vocab
        from server.core.incident_glue import call

        vocabulary = lens.peek("openapi", "vocab")
        if vocabulary is None:
            vocabulary = lens.memo(("openapi", "vocab"), await anyio.to_thread.run_sync(
                lambda: call(vocab, library=lens.library)
            ))
    return JSONResponse(build_openapi(request.app.state.version, base, vocabulary))


def by_method(path: str, **handlers: Callable[[Request], Awaitable[Response]]) -> Route:
    """One route for several methods of a path, so a 405 there lists all of them in ``Allow``
    (two routes on one path answer with the first one's methods only)."""

    async def dispatch(request: Request) -> Response:
        method = "GET" if request.method == "HEAD" else request.method
        return await handlers[method](request)

    return Route(path, dispatch, methods=list(handlers), name=path)


def routes() -> list[BaseRoute]:
    return [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/api/openapi.json", openapi, methods=["GET"]),
        by_method("/api/traces", GET=list_traces, POST=post_trace),
        by_method("/api/traces/{trace_id}", GET=get_trace, DELETE=delete_trace),
        Route("/api/traces/{trace_id}/whatif", get_whatif, methods=["GET"]),
        Route("/api/traces/{trace_id}/diagnosis", get_diagnosis, methods=["GET"]),
        Route("/api/traces/{trace_id}/heatmap.png", get_heatmap_png, methods=["GET"]),
        Route("/api/traces/{trace_id}/timeline.json", get_timeline, methods=["GET"]),
        Route("/api/traces/{trace_id}/heatmap.json", get_heatmap_json, methods=["GET"]),
        Route("/api/cases", list_cases, methods=["GET"]),
        Route("/api/cases/{case_id}", get_case, methods=["GET"]),
        Route("/api/cases/{case_id}/similar", similar_cases, methods=["GET"]),
        Route("/api/topics/{name}", get_topic, methods=["GET"]),
        Route("/api/vocab", get_vocab, methods=["GET"]),
        Route("/api/fleet", list_fleet, methods=["GET"]),
        Route("/api/fleet/{name}", get_fleet, methods=["GET"]),
    ]
