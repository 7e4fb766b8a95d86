"""schemathesis against the served OpenAPI document, in process (``from_asgi``), every check.

Bounded: a few derandomised examples per operation, no example database, and a watchdog that
ends the run if the whole module takes longer than ``WATCHDOG_S`` (it dumps every thread's stack
first). Where a check cannot apply to an operation, ``SKIPPED`` says why.
"""

from __future__ import annotations

import faulthandler
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis import checks  # noqa: E402

from server.app import create_app  # noqa: E402
from server.core.settings import Settings  # noqa: E402

WATCHDOG_S = 240
DATA = Path(tempfile.mkdtemp(prefix="lens-schemathesis-"))


class FreshAppPerLifespan:
    """schemathesis ends the ASGI lifespan after every test item and starts it again; the MCP
    session manager inside ``create_app`` runs once per instance, so each lifespan gets a new app
    (over one data folder). ``testserver`` is the Host schemathesis' in-process client sends."""

    def __init__(self) -> None:
        self.app: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan" or self.app is None:
            self.app = create_app(Settings(data_dir=DATA, allowed_hosts=("testserver",), workers=0))
        await self.app(scope, receive, send)


schema = schemathesis.openapi.from_asgi("/api/openapi.json", FreshAppPerLifespan())

# (method, path) -> checks that cannot apply there, and why
SKIPPED: dict[tuple[str, str], tuple[Any, str]] = {
    ("POST", "/api/traces"): (
        checks.positive_data_acceptance,
        "a schema-valid upload is any bytes; random bytes are not a trace, so the reader refuses "
        "them (422, with the reason) although the request matches the schema",
    ),
    **{
        (method, "/api/jobs/{job}/windows/{window}/ranks/{rank}"): (
            checks.positive_data_acceptance,
            "a schema-valid rank upload is any bytes, which the reader refuses (422) like an upload, "
            "and rank must stay below world_size, a rule across two parameters",
        )
        for method in ("PUT", "POST")
    },
    ("GET", "/api/cases"): (
        checks.positive_data_acceptance,
        "year_from must not be after year_to: a rule across two parameters, which OpenAPI 3.1 "
        "cannot state (the parameters' descriptions say it; the 400 names both values)",
    ),
}


@pytest.fixture(scope="module", autouse=True)
def watchdog() -> Iterator[None]:
    faulthandler.dump_traceback_later(WATCHDOG_S, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@schema.parametrize()
@settings(
    max_examples=3,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
def test_the_api_does_what_its_openapi_says(case: Any) -> None:
    skipped = SKIPPED.get((case.operation.method.upper(), case.operation.path))
    case.call_and_validate(excluded_checks=[skipped[0]] if skipped else [])


def test_the_document_names_a_server_and_real_incident_schemas() -> None:
    from starlette.testclient import TestClient

    with TestClient(FreshAppPerLifespan(), base_url="http://testserver") as client:
        doc = client.get("/api/openapi.json").json()
    assert doc["servers"] == [{"url": "http://testserver", "description": "this server"}]
    for path in (
        "/api/cases",
        "/api/cases/{case_id}",
        "/api/cases/{case_id}/similar",
        "/api/topics/{name}",
        "/api/vocab",
        "/api/fleet",
        "/api/fleet/{name}",
        "/api/jobs",
        "/api/alerts/{alert_id}",
    ):
        schema_ = doc["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
        assert "$ref" in schema_, path
    limit = next(p for p in doc["paths"]["/api/traces"]["get"]["parameters"] if p["name"] == "limit")
    assert (limit["schema"]["minimum"], limit["schema"]["maximum"]) == (1, 100)
