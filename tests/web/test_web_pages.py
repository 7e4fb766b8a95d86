"""The web surface without a browser: security headers, escaping, login cookie, pages outside the
OpenAPI document, the heatmap JSON route; and the MCP App contract (real SDK client)."""

from __future__ import annotations

import concurrent.futures
import json
import re
from pathlib import Path

import anyio
import httpx
import pytest
from mcp.client import Client, advertise
from web_testing import TOKEN, native_trace

from server.core.runtime import LensHolder
from server.core.settings import Settings
from server.mcp.tools import build_mcp
from server.web.app_view import app_html
from tests._support.live import Live

APPS = advertise("io.modelcontextprotocol/ui", {"mimeTypes": ["text/html;profile=mcp-app"]})


def sample_id(url: str, headers: dict[str, str] | None = None) -> str:
    items = httpx.get(url + "/api/traces", headers=headers or {}).json()["items"]
    return next(t["trace_id"] for t in items if t["name"].startswith("sample ST"))


def test_pages_carry_a_strict_csp_and_no_inline_script(live: Live) -> None:
    tid = sample_id(live.url)
    for path in ("/", f"/traces/{tid}", "/incidents", "/incidents?q=pipeline+stage"):
        r = httpx.get(live.url + path, timeout=60)
        assert r.status_code == 200, (path, r.text[:300])
        csp = r.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
        assert r.headers["x-content-type-options"] == "nosniff"
        for tag in re.findall(r"<script[^>]*>", r.text):
            assert "src=" in tag or 'type="application/json"' in tag, (path, tag)
        assert " style=" not in r.text, path


def test_unknown_trace_is_a_404_page_not_a_crash(live: Live) -> None:
    r = httpx.get(live.url + "/traces/nope")
    assert r.status_code == 404 and "text/html" in r.headers["content-type"]
    assert "no trace" in r.text


def test_everything_from_a_trace_is_escaped(live: Live) -> None:
    evil = "<script>alert(1)</script>"
    r = httpx.post(
        live.url + "/api/traces",
        params={"filename": evil, "format": "native"},
        content=native_trace(2, 3),
        timeout=60,
    )
    assert r.status_code in (200, 201), r.text
    page = httpx.get(live.url + "/", timeout=60).text
    assert evil not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_pages_stay_out_of_the_openapi_document(live: Live) -> None:
    paths = set(httpx.get(live.url + "/api/openapi.json").json()["paths"])
    assert all(p.startswith(("/api/", "/healthz")) for p in paths), paths
    assert "/api/traces/{trace_id}/heatmap.json" in paths


def test_heatmap_json_and_the_adaptive_scale(live: Live) -> None:
    tid = sample_id(live.url)
    fixed = httpx.get(f"{live.url}/api/traces/{tid}/heatmap.json", timeout=60).json()
    assert (fixed["vmin"], fixed["vmax"], fixed["scale"]) == (1.0, 1.5, "fixed")
    assert "min(" not in fixed["title"] and "S_w" in fixed["title"]
    ad = httpx.get(f"{live.url}/api/traces/{tid}/heatmap.json?scale=adaptive").json()
    assert ad["scale"] == "adaptive" and ad["vmax"] == pytest.approx(max(map(max, ad["values"])), abs=0.01)
    png = httpx.get(f"{live.url}/api/traces/{tid}/heatmap.png?scale=adaptive", timeout=60)
    assert png.status_code == 200 and png.content[:4] == b"\x89PNG"
    bad = httpx.get(f"{live.url}/api/traces/{tid}/heatmap.json?scale=log")
    assert bad.status_code == 400 and "scale" in bad.json()["error"]["message"]


def test_login_sets_a_strict_httponly_cookie_that_pages_and_same_origin_fetches_accept(secured: Live) -> None:
    url = secured.url
    with httpx.Client(base_url=url, follow_redirects=False, timeout=60) as c:
        r = c.get("/traces/x?y=1")
        assert r.status_code == 303 and r.headers["location"].startswith("/login?next=")
        assert TOKEN not in r.headers["location"]
        assert c.get("/api/traces").status_code == 401
        assert c.get("/static/lens.css").status_code == 200
        assert c.post("/login", data={"token": TOKEN}).status_code == 403, "a form post needs an Origin"
        wrong = c.post("/login", data={"token": "nope"}, headers={"Origin": url})
        assert wrong.status_code == 401
        ok = c.post("/login", data={"token": TOKEN, "next": "//evil.example/x"}, headers={"Origin": url})
        assert ok.status_code == 303 and ok.headers["location"] == "/"
        cookie = ok.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and TOKEN not in cookie
        assert TOKEN not in ok.headers["location"]
        assert c.get("/").status_code == 200
        same = {"Sec-Fetch-Site": "same-origin"}
        assert c.get("/api/traces", headers=same).status_code == 200
        assert c.get("/api/traces", headers={"Sec-Fetch-Site": "cross-site"}).status_code == 403
        assert c.post("/mcp", json={}).status_code == 401, "the cookie never opens /mcp"
        up = c.post("/api/traces?format=native", content=native_trace(), headers=same)
        assert up.status_code == 403, "a cookie-signed POST needs an Origin"
        up = c.post("/api/traces?format=native", content=native_trace(), headers={**same, "Origin": url})
        assert up.status_code in (200, 201), up.text
        foreign = c.post("/api/traces?format=native", content=b"x", headers={"Origin": "http://evil.example"})
        assert foreign.status_code == 403
        c.cookies.clear()
        assert c.get("/", headers=same).status_code == 303


def _dump(result: object) -> str:
    return json.dumps(result.model_dump(mode="json", by_alias=True, exclude_none=True), sort_keys=True)  # type: ignore[attr-defined]


def test_the_app_is_listed_for_apps_clients_and_other_clients_get_the_old_answers(tmp_path: Path) -> None:
    """A client that negotiates Apps lists and reads the ui:// resource; one that does not gets
    byte for byte the answer of a server built without the App.

    Run in a thread of its own: once a browser test ran, Playwright's sync API keeps an event
    loop in the main thread for the rest of the session."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(anyio.run, _app_contract, tmp_path).result(timeout=600)


async def _app_contract(tmp_path: Path) -> None:
    from diagnosers.samples import artifact_trace

    folder = artifact_trace("SE").parent.resolve()
    settings = Settings(data_dir=tmp_path / "data", allow_dirs=(folder,), workers=0)
    answers: dict[str, dict[str, str]] = {}
    for name, html in (("without", None), ("with", app_html())):
        async with Client(build_mcp(settings, LensHolder(), app_html=html)) as c:
            up = await c.call_tool("upload_trace", {"path": "trace-SE.parquet"})
            tid = up.structured_content["trace_id"]
            answers[name] = {
                tool: _dump(await c.call_tool(tool, {"trace_id": tid}))
                for tool in ("diagnose", "get_heatmap")
            }
            tools = {t.name: t for t in (await c.list_tools()).tools}
            if html is None:
                assert tools["diagnose"].meta is None
                continue
            assert tools["diagnose"].meta["ui"]["resourceUri"] == "ui://straggler-lens/diagnosis.html"
            assert tools["get_heatmap"].meta["ui"]["resourceUri"] == "ui://straggler-lens/diagnosis.html"
    assert answers["with"] == answers["without"]
    heatmap = json.loads(answers["with"]["get_heatmap"])
    assert len(answers["with"]["get_heatmap"]) <= 30_000, "get_heatmap at 64 workers stays under 30 kB"
    assert "_meta" not in heatmap or "straggler-lens/heatmap-detail" not in heatmap["_meta"]

    async with Client(build_mcp(settings, LensHolder(), app_html=app_html()), extensions=[APPS]) as c:
        resources = {str(r.uri): r for r in (await c.list_resources()).resources}
        app = resources["ui://straggler-lens/diagnosis.html"]
        assert app.mime_type == "text/html;profile=mcp-app"
        body = (await c.read_resource("ui://straggler-lens/diagnosis.html")).contents[0]
        assert body.text.startswith("<!doctype html>") and "ui/initialize" in body.text
        tid = (await c.call_tool("list_traces", {})).structured_content["items"][0]["trace_id"]
        r = await c.call_tool("get_heatmap", {"trace_id": tid})
        detail = r.meta["straggler-lens/heatmap-detail"]
        assert len(detail["ranks"]) == 2 and detail["steps"]
        assert (
            json.loads(_dump(r))["structuredContent"]
            == json.loads(answers["without"]["get_heatmap"])["structuredContent"]
        )
