"""Host and Origin checks as a client sees them, on every route family over a real socket."""

from __future__ import annotations

import httpx
import pytest
from lens_testing import INIT, MCP_HEADERS, Live


def _get(live: Live, path: str, host: str, **headers: str) -> httpx.Response:
    return httpx.get(f"{live.url}{path}", headers={"Host": host, **headers})


def _mcp(live: Live, host: str, **headers: str) -> httpx.Response:
    return httpx.post(live.mcp_url, json=INIT, headers={**MCP_HEADERS, "Host": host, **headers})


@pytest.mark.parametrize("host", ["localhost:80@evil.com", "localhost@evil.com", "localhost:8x", "evil.com"])
def test_foreign_and_userinfo_hosts_are_refused_everywhere(live: Live, host: str) -> None:
    for path in ("/healthz", "/api/traces", "/api/openapi.json"):
        assert _get(live, path, host).status_code == 421, (path, host)
    assert _mcp(live, host).status_code == 421, host


@pytest.mark.parametrize("host", ["LOCALHOST", "LocalHost:{port}", "127.0.0.1:{port}"])
def test_host_names_are_case_insensitive_on_every_route(live: Live, host: str) -> None:
    port = live.url.rsplit(":", 1)[1]
    host = host.format(port=port)
    for path in ("/healthz", "/api/traces", "/api/openapi.json"):
        assert _get(live, path, host).status_code == 200, (path, host)
    r = _mcp(live, host, Origin=f"HTTP://LOCALHOST:{port}")
    assert r.status_code == 200, (host, r.text)


def test_an_origin_with_userinfo_is_refused(live: Live) -> None:
    port = live.url.rsplit(":", 1)[1]
    for origin in (f"http://localhost:{port}@evil.com", f"http://evil.com@localhost:{port}"):
        assert _get(live, "/healthz", f"localhost:{port}", Origin=origin).status_code == 403, origin
