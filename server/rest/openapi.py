"""The OpenAPI 3.1 document of the REST API, built from the same pydantic models the routes return."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from server.core.errors import ErrorBody
from server.core.fleet_reports import FleetReportList, StoredFleetReport
from server.core.jobs_api import AlertDetail, AlertList, Comparison, JobDetail, JobList, WindowDetail
from server.core.models import DeleteResult, Health, TraceInfo, TraceList, UploadResult


def _schemas(models: list[type[BaseModel]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for model in models:
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        out.update(schema.pop("$defs", {}))
        out[model.__name__] = schema
    return out


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(name: str, description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ref(name)}}}


def _q(
    name: str, description: str, kind: str = "string", required: bool = False, **bounds: Any
) -> dict[str, Any]:
    """A query parameter; ``bounds`` (minimum, maximum, pattern, default ...) are the ones the
    handler enforces. An empty string value of a string parameter means "not given"; an integer
    parameter refuses it (400)."""
    return {
        "name": name,
        "in": "query",
        "required": required,
        "description": description,
        "schema": {"type": kind, **bounds},
    }


def _int(
    name: str, description: str, lo: int, hi: int | None = None, default: int | None = None
) -> dict[str, Any]:
    bounds: dict[str, Any] = {"minimum": lo}
    if hi is not None:
        bounds["maximum"] = hi
    if default is not None:
        bounds["default"] = default
    return _q(name, description, "integer", **bounds)


def _path(name: str, description: str, **bounds: Any) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": {"type": "string", **bounds},
    }


# job and window names the monitoring routes accept (server.core.monitor.ID_RE), alert ids
NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
NAME_OR_EMPTY = r"^([A-Za-z0-9][A-Za-z0-9._-]{0,127})?$"
ALERT_ID = r"^[A-Za-z0-9]{1,64}$"
# the timeline's step selection: empty or `default` (worst and typical), or up to 16 step ids
STEPS = r"^(default|-?[0-9]{1,18}(,-?[0-9]{1,18}){0,15})?$"


ERRORS = {
    "400": _json("ErrorBody", "bad request (the message names the parameter)"),
    "405": _json("ErrorBody", "method not allowed (the Allow header lists the methods)"),
    "401": _json("ErrorBody", "missing or wrong bearer token"),
    "404": _json("ErrorBody", "unknown id"),
    "421": _json("ErrorBody", "Host header not allowed"),
    "403": _json("ErrorBody", "Origin header not allowed"),
}
MAX_SIZE = 1_000_000
PAGE = [_int("limit", "page size", 1, 100, 20), _int("offset", "items to skip", 0, default=0)]
CASE_PAGE = [_int("limit", "page size", 1, 100, 10), _int("offset", "items to skip", 0, default=0)]
READ_OPTIONS = [
    _q("filename", "raw body: the file name (its suffix helps detect the format)", maxLength=255),
    _q("format", "reader name; default: detect", maxLength=40),
    *[_int(k, f"{k} size, overrides the meta", 1, MAX_SIZE) for k in ("dp", "pp", "tp", "cp", "vpp")],
    _int("gpus_per_host", "GPUs per host", 1, MAX_SIZE),
    _q(
        "layers_per_stage", "transformer layers per PP stage, e.g. 9,9,9,9", pattern=r"^[1-9]\d*(,[1-9]\d*)*$"
    ),
    _q("partial", "analyse a subset of the job's ranks as a smaller job", "boolean"),
]
TRACE = _path("trace_id", "trace handle returned by the upload")
STEP = _q("step", "one step's heatmap instead of the job's", "integer")
SCALE = _q("scale", "fixed (the study's 1.0-1.5, the default) or adaptive (stretched over the values)")


def build_openapi(version: str, server_url: str = "/", vocabulary: Any = None) -> dict[str, Any]:
    """The document served at ``/api/openapi.json``; ``server_url`` is the base the client used,
    ``vocabulary`` (the library's ``Vocabulary``) lists the values the incident filters accept."""
    models: list[type[BaseModel]] = [ErrorBody, Health, TraceInfo, TraceList, UploadResult, DeleteResult]
    extra: dict[str, Any] = {}
    try:
        from diagnosers.report import WhatIfReport

        models.append(WhatIfReport)
    except ImportError:
        pass
    try:
        from diagnosers.diagnose import Diagnosis

        models.append(Diagnosis)
    except ImportError:
        extra["Diagnosis"] = {"type": "object"}
    try:
        from incidents.schema import Case
        from incidents.search import IncidentResults, TopicCases, Vocabulary

        models += [Case, IncidentResults, TopicCases, Vocabulary]
    except ImportError:
        pass
    schemas = {**_schemas(models), **extra}
    paths: dict[str, Any] = {
        "/healthz": {"get": {"summary": "Liveness and counts", "responses": {"200": _json("Health", "ok")}}},
        "/api/traces": {
            "post": {
                "summary": "Upload one job's trace",
                "description": "multipart/form-data with every file part named `files` (per-rank trace "
                "files plus an optional meta .yaml), or a raw body. gzip accepted. Same content again "
                "answers 200 with the existing trace_id.",
                "parameters": READ_OPTIONS,
                "requestBody": {
                    "content": {
                        "multipart/form-data": {
                            "schema": {
                                "type": "object",
                                "properties": {
                                    "files": {
                                        "type": "array",
                                        "items": {"type": "string", "format": "binary"},
                                    }
                                },
                            }
                        },
                        "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
                    }
                },
                "responses": {
                    "201": _json("UploadResult", "stored"),
                    "200": _json("UploadResult", "already stored (same content)"),
                    "413": _json("ErrorBody", "over --max-upload-mb or the decompression cap"),
                    "422": _json("ErrorBody", "the reader rejected the trace; the message says where"),
                    **ERRORS,
                },
            },
            "get": {
                "summary": "List stored traces",
                "parameters": PAGE,
                "responses": {"200": _json("TraceList", "page"), **ERRORS},
            },
        },
        "/api/traces/{trace_id}": {
            "get": {
                "summary": "Describe a trace",
                "parameters": [TRACE],
                "responses": {"200": _json("TraceInfo", "ok"), **ERRORS},
            },
            "delete": {
                "summary": "Delete a trace, its files and its cached results",
                "parameters": [TRACE],
                "responses": {"200": _json("DeleteResult", "deleted"), **ERRORS},
            },
        },
        "/api/traces/{trace_id}/whatif": {
            "get": {
                "summary": "The full what-if report",
                "parameters": [
                    TRACE,
                    _q(
                        "include",
                        "extras computed on demand: `timeline` (critical paths, time breakdown)",
                        enum=["", "timeline"],
                    ),
                ],
                "responses": {"200": _json("WhatIfReport", "ok"), **ERRORS},
            }
        },
        "/api/traces/{trace_id}/diagnosis": {
            "get": {
                "summary": "The diagnosis",
                "parameters": [TRACE],
                "responses": {"200": _json("Diagnosis", "ok"), **ERRORS},
            }
        },
        "/api/traces/{trace_id}/heatmap.png": {
            "get": {
                "summary": "DP x PP slowdown heatmap",
                "parameters": [
                    TRACE,
                    _int("step", "one step's heatmap instead of the job's", -(2**62), 2**62),
                    SCALE,
                ],
                "responses": {"200": {"description": "PNG", "content": {"image/png": {}}}, **ERRORS},
            }
        },
        "/api/traces/{trace_id}/timeline.json": {
            "get": {
                "summary": "Chrome trace-event timeline: actual vs straggler-free run, critical paths marked",
                "parameters": [
                    TRACE,
                    _q(
                        "steps",
                        "comma-separated step ids (at most 16); empty or `default`: worst, typical",
                        pattern=STEPS,
                    ),
                ],
                "responses": {
                    "200": {"description": "trace-event JSON", "content": {"application/json": {}}},
                    **ERRORS,
                },
            }
        },
        "/api/traces/{trace_id}/heatmap.json": {
            "get": {
                "summary": "DP x PP slowdown heatmap as data (values, labels, colour scale, clipping)",
                "parameters": [TRACE, STEP, SCALE],
                "responses": {"200": _json("Heatmap", "ok"), **ERRORS},
            }
        },
    }
    paths.update(incident_paths(vocabulary))
    paths.update(job_paths())
    schemas.update(_schemas(list(JOB_MODELS)))
    paths.update(fleet_paths())
    schemas.update(_schemas(list(FLEET_MODELS)))
    return {
        "openapi": "3.1.0",
        "info": {"title": "Straggler Lens", "version": version},
        "servers": [{"url": server_url, "description": "this server"}],
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}, {}],
    }


def _one_of(vocabulary: Any, part: str) -> dict[str, Any]:
    """The accepted values of a filter ("" = any), when the library is installed."""
    if vocabulary is None:
        return {"maxLength": 80}
    return {"enum": ["", *(e.name for e in getattr(vocabulary, part))]}


def incident_paths(vocabulary: Any = None) -> dict[str, Any]:
    filters = [
        _q("q", "free-text query; empty = list instead of search", maxLength=500),
        _q(
            "category", "incident category (see /api/vocab); empty = any", **_one_of(vocabulary, "categories")
        ),
        _q("cause", "cause id; empty = any", **_one_of(vocabulary, "causes")),
        _q("tag", "tag; empty = any", **_one_of(vocabulary, "tags")),
        _q("topic", "topic name; empty = any", **_one_of(vocabulary, "topics")),
        _q("org", "organisation (case-insensitive substring); empty = any", maxLength=80),
        _int("year_from", "earliest year (not after year_to)", 1990, 2100),
        _int("year_to", "latest year (not before year_from)", 1990, 2100),
        *CASE_PAGE,
    ]
    case = _path("case_id", "incident id, e.g. IL-0417")
    return {
        "/api/cases": {
            "get": {
                "summary": "Search incidents",
                "parameters": filters,
                "responses": {"200": _json("IncidentResults", "ranked or newest-first cases"), **ERRORS},
            }
        },
        "/api/cases/{case_id}": {
            "get": {
                "summary": "One incident",
                "parameters": [case],
                "responses": {"200": _json("Case", "the full case"), **ERRORS},
            }
        },
        "/api/cases/{case_id}/similar": {
            "get": {
                "summary": "Incidents similar to one",
                "parameters": [case, _int("limit", "how many", 1, 20, 5)],
                "responses": {"200": _json("IncidentResults", "look-alike cases"), **ERRORS},
            }
        },
        "/api/topics/{name}": {
            "get": {
                "summary": "A topic page",
                "parameters": [_path("name", "topic name")],
                "responses": {"200": _json("TopicCases", "the topic and its cases"), **ERRORS},
            }
        },
        "/api/vocab": {
            "get": {
                "summary": "Cause ids, patterns, categories",
                "responses": {"200": _json("Vocabulary", "the full vocabulary"), **ERRORS},
            }
        },
    }


JOB_MODELS = (JobList, JobDetail, WindowDetail, Comparison, AlertList, AlertDetail)
FLEET_MODELS = (FleetReportList, StoredFleetReport)


def job_paths() -> dict[str, Any]:
    """The monitoring routes: live ingestion, jobs and windows, comparisons, alerts."""
    job = _path("job", "job name: 1-128 of [A-Za-z0-9._-], starting alphanumeric", pattern=NAME)
    window = _path("window", "window id: 1-128 of [A-Za-z0-9._-], starting alphanumeric", pattern=NAME)
    md = {"description": "Markdown", "content": {"text/markdown": {"schema": {"type": "string"}}}}
    conflict = {"409": _json("ErrorBody", "the window is assembled already / not analysed yet")}

    def get(summary: str, params: list[Any], ok: dict[str, Any], more: dict[str, Any] | None = None) -> Any:
        return {
            "get": {
                "summary": summary,
                "parameters": params,
                "responses": {"200": ok, **ERRORS, **(more or {})},
            }
        }

    upload = {
        "summary": "Live ingestion: one rank's trace of a profiling window (gzip or plain body)",
        "parameters": [
            job,
            window,
            {
                "name": "rank",
                "in": "path",
                "required": True,
                "description": "the sender's rank, below world_size",
                "schema": {"type": "integer", "minimum": 0, "maximum": 65535},
            },
            _int("world_size", "ranks the window expects, above rank (else: from the first file)", 1, 65536),
            _q("format", "reader name; default: detect", maxLength=40),
            _q("filename", "the file's name (its suffix helps detect the format)", maxLength=255),
        ],
        "requestBody": {
            "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}
        },
        "responses": {
            "201": {"description": "stored (the window's status in the body)"},
            "200": {"description": "the same file was stored before"},
            "413": _json("ErrorBody", "the file passes the upload budget"),
            "422": _json("ErrorBody", "the file is not a trace the readers know (the reason named)"),
            **ERRORS,
            **conflict,
        },
    }
    return {
        "/api/jobs/{job}/windows/{window}/ranks/{rank}": {"put": upload, "post": upload},
        "/api/jobs": get(
            "Monitored jobs",
            [*PAGE, _q("q", "glob on the job name; empty: all", maxLength=128)],
            _json("JobList", "ok"),
        ),
        "/api/jobs/{job}": get(
            "A job's windows and trend",
            [job, _int("limit", "windows, newest first", 1, 100, 20)],
            _json("JobDetail", "ok"),
        ),
        "/api/jobs/{job}/windows/{window}": get("A window", [job, window], _json("WindowDetail", "ok")),
        "/api/jobs/{job}/windows/{window}/diagnosis.md": get(
            "A window's diagnosis as Markdown", [job, window], md, conflict
        ),
        "/api/jobs/{job}/compare": get(
            "Compare two windows",
            [
                job,
                _q("before", "window id", required=True, pattern=NAME),
                _q("after", "window id", required=True, pattern=NAME),
            ],
            _json("Comparison", "ok"),
            conflict,
        ),
        "/api/traces/{trace_id}/diagnosis.md": get("A trace's diagnosis as Markdown", [TRACE], md),
        "/api/alerts": get(
            "Alerts",
            [*PAGE, _q("job", "only this job; empty: all", pattern=NAME_OR_EMPTY)],
            _json("AlertList", "ok"),
        ),
        "/api/alerts/{alert_id}": get(
            "An alert and its delivery log",
            [_path("alert_id", "alert id (from GET /api/alerts)", pattern=ALERT_ID)],
            _json("AlertDetail", "ok"),
        ),
    }


def fleet_paths() -> dict[str, Any]:
    """The stored fleet reports (``straggler-lens fleet`` output folders under ``--fleet-dir``)."""
    unreadable = {"422": _json("ErrorBody", "the folder's report.json is not a fleet report")}
    ambiguous = {"409": _json("ErrorBody", "no name given and several reports are stored")}
    return {
        "/api/fleet": {
            "get": {
                "summary": "Stored fleet reports (name, folder, jobs)",
                "responses": {"200": _json("FleetReportList", "ok"), **ERRORS},
            }
        },
        "/api/fleet/{name}": {
            "get": {
                "summary": "One stored fleet report",
                "parameters": [_path("name", "report name (its folder's name)", maxLength=200)],
                "responses": {
                    "200": _json("StoredFleetReport", "ok"),
                    **ERRORS,
                    **unreadable,
                    **ambiguous,
                },
            }
        },
    }
