"""Issue 19's malformed-input classes over REST and MCP: a 4xx or a tool error that says what and
where, never a 5xx or a bare tool error, and the store unchanged."""

from __future__ import annotations

import base64

import httpx
import pytest
from hostile_inputs import Case, cases, two_stage
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests._support.live import Live

CASES = cases()


def stored(live: Live) -> list[str]:
    r = httpx.get(f"{live.url}/api/traces?limit=100")
    assert r.status_code == 200
    return sorted(t["trace_id"] for t in r.json()["items"])


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_rest_upload_answers_4xx_saying_what_and_where(live: Live, case: Case) -> None:
    before = stored(live)
    files = [("files", (name, data)) for name, data in case.files]
    r = httpx.post(f"{live.url}/api/traces", files=files, params=case.query, timeout=60)
    assert r.status_code in case.status, (r.status_code, r.text[:500])
    if r.status_code >= 400:
        message = r.json()["error"]["message"]
        assert len(message) < 1000, message
        for word in case.words:
            assert word in message, message
        for word in case.absent:
            assert word not in message, message
        assert stored(live) == before
    assert httpx.get(f"{live.url}/healthz").status_code == 200


def test_causality_violation_is_flagged_in_the_notes(live: Live) -> None:
    r = httpx.post(f"{live.url}/api/traces", files=[("files", ("c.jsonl", two_stage(recv_first=True)))])
    assert r.status_code in (200, 201), r.text
    notes = " ".join(r.json()["summary"]["notes"])
    assert "causality violated" in notes
    ok = httpx.post(f"{live.url}/api/traces", files=[("files", ("ok.jsonl", two_stage()))])
    assert ok.status_code in (200, 201), ok.text
    assert "causality" not in " ".join(ok.json()["summary"]["notes"])


def test_oversized_boundary_and_long_filename_are_4xx(live: Live) -> None:
    before = stored(live)
    body = (
        b"--" + b"b" * 8000 + b'\r\nContent-Disposition: form-data; name="files"; filename="a"\r\n\r\nx\r\n'
    )
    r = httpx.post(
        f"{live.url}/api/traces",
        content=body,
        headers={"content-type": "multipart/form-data; boundary=" + "b" * 8000},
    )
    assert 400 <= r.status_code < 500, r.text
    long = "a" * 1000 + ".jsonl"
    r = httpx.post(f"{live.url}/api/traces", files=[("files", (long, b'{"job": {}}\n'))])
    assert 400 <= r.status_code < 500, r.text
    r = httpx.post(f"{live.url}/api/traces", params={"filename": long}, content=b'{"job": {}}\n')
    assert 400 <= r.status_code < 500, r.text
    assert stored(live) == before


@pytest.mark.parametrize(
    "param", ["limit=" + "9" * 30, "offset=" + "9" * 30, "offset=-1", "limit=" + "9" * 5000]
)
def test_huge_query_integers_are_400(live: Live, param: str) -> None:
    r = httpx.get(f"{live.url}/api/traces?{param}")
    assert r.status_code == 400, r.text
    r = httpx.get(f"{live.url}/api/cases?{param}")
    assert r.status_code in (400, 503), r.text


MCP_CASES = [c for c in CASES if not c.query and len(c.files) == 1 and len(c.files[0][1]) < 700_000]


@pytest.mark.anyio
async def test_mcp_upload_errors_carry_their_reason(live: Live) -> None:
    before = stored(live)
    async with Client(streamable_http_client(live.mcp_url)) as c:
        for case in MCP_CASES:
            name, data = case.files[0]
            r = await c.call_tool(
                "upload_trace",
                {"content": base64.b64encode(data).decode(), "encoding": "base64", "filename": name},
            )
            text = " ".join(getattr(b, "text", "") for b in r.content)
            if 201 in case.status and not r.is_error:
                continue
            assert r.is_error, (case.name, text)
            assert text.strip() != "Error executing tool upload_trace" and ":" in text, (case.name, text)
            for word in case.words:
                assert word in text, (case.name, text)
    assert stored(live) == before
