"""Security on every route: Origin/Host, bearer token on MCP and REST alike, size and gzip caps,
server-side path restrictions, and a store that survives malformed input."""

from __future__ import annotations

import gzip
import os
import time
from pathlib import Path

import httpx
import httpx2
import pytest
from lens_testing import INIT, MCP_HEADERS, TOKEN, Live, native_jsonl
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from server.core.security import PathNotAllowed, resolve_allowed
from server.core.settings import Settings, SettingsError

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def http(secured: Live) -> httpx.Client:
    with httpx.Client(base_url=secured.url, timeout=60) as client:
        yield client


@pytest.mark.parametrize("path", ["/healthz", "/api/traces", "/api/openapi.json"])
@pytest.mark.parametrize(
    ("headers", "status", "code"),
    [
        ({}, 401, "unauthorized"),
        ({"Authorization": "Bearer wrong-token-wrong-token"}, 401, "unauthorized"),
        ({"Authorization": TOKEN}, 401, "unauthorized"),  # no scheme
        ({**AUTH, "Origin": "http://evil.example"}, 403, "invalid_origin"),
        ({**AUTH, "Host": "evil.example"}, 421, "invalid_host"),
        ({**AUTH, "Origin": "null"}, 403, "invalid_origin"),
    ],
)
def test_rest_routes_refuse_without_token_or_with_foreign_origin(
    http: httpx.Client, path: str, headers: dict, status: int, code: str
) -> None:
    r = http.get(path, headers=headers)
    assert r.status_code == status
    assert r.json()["error"]["code"] == code


def test_rest_accepts_the_token_and_loopback_origins(http: httpx.Client, secured: Live) -> None:
    port = secured.url.rsplit(":", 1)[1]
    for origin in (None, f"http://localhost:{port}", f"http://127.0.0.1:{port}"):
        headers = {**AUTH, **({"Origin": origin} if origin else {})}
        assert http.get("/api/traces", headers=headers).status_code == 200


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        (MCP_HEADERS, 401),
        ({**MCP_HEADERS, "Authorization": "Bearer nope-nope-nope-nope"}, 401),
        ({**MCP_HEADERS, **AUTH, "Origin": "http://evil.example"}, 403),
        ({**MCP_HEADERS, **AUTH, "Host": "evil.example:80"}, 421),
    ],
)
def test_mcp_endpoint_refuses_the_same_way(http: httpx.Client, headers: dict, status: int) -> None:
    r = http.post("/mcp", json=INIT, headers=headers)
    assert r.status_code == status


def test_mcp_initialize_with_token_succeeds(http: httpx.Client) -> None:
    r = http.post("/mcp", json=INIT, headers={**MCP_HEADERS, **AUTH})
    assert r.status_code == 200 and r.headers.get("mcp-session-id")


@pytest.mark.anyio
async def test_sdk_client_needs_the_token(secured: Live) -> None:
    async with (
        httpx2.AsyncClient(headers=AUTH) as hc,
        Client(streamable_http_client(secured.mcp_url, http_client=hc)) as c,
    ):
        tools = await c.list_tools()
    assert "describe_trace" in {t.name for t in tools.tools}
    with pytest.raises(ExceptionGroup) as refused:  # the SDK raises from its task group
        async with (
            httpx2.AsyncClient() as hc,
            Client(streamable_http_client(secured.mcp_url, http_client=hc)) as c,
        ):
            await c.list_tools()
    assert refused.group_contains(MCPError, match="error response", depth=None)


def test_oversize_upload_is_refused_and_nothing_is_stored(http: httpx.Client, secured: Live) -> None:
    before = http.get("/api/traces", headers=AUTH).json()["total"]
    big = os.urandom(2 * 1024 * 1024)  # the secured server caps uploads at 1 MiB
    r = http.post("/api/traces", params={"filename": "big.jsonl"}, content=big, headers=AUTH)
    assert r.status_code == 413 and r.json()["error"]["code"] == "upload_too_large"

    # without a Content-Length (chunked), the stream is cut once it passes the cap
    def chunks():
        for _ in range(40):
            yield os.urandom(64 * 1024)

    r = http.post("/api/traces", params={"filename": "big.jsonl"}, content=chunks(), headers=AUTH)
    assert r.status_code == 413
    assert http.get("/api/traces", headers=AUTH).json()["total"] == before
    assert list((secured.settings.data_dir / "tmp").iterdir()) == []


def test_gzip_bomb_is_refused_by_the_decompression_cap(http: httpx.Client, secured: Live) -> None:
    bomb = gzip.compress(b"\0" * (64 * 1024 * 1024), compresslevel=9)  # 64 MiB of zeros, ~64 KiB on the wire
    assert len(bomb) < 1024 * 1024
    r = http.post("/api/traces", params={"filename": "bomb.jsonl.gz"}, content=bomb, headers=AUTH)
    assert r.status_code == 413 and r.json()["error"]["code"] == "decompressed_too_large"
    files = [("files", ("bomb.jsonl.gz", bomb))]
    r = http.post("/api/traces", files=files, headers=AUTH)
    assert r.status_code == 413
    assert list((secured.settings.data_dir / "tmp").iterdir()) == []


def test_malformed_uploads_leave_the_server_and_store_intact(http: httpx.Client) -> None:
    listing = http.get("/api/traces", headers=AUTH).json()
    bad_bodies = [
        b"\x00\x01\x02 not a trace",
        b'{"job": {"dp_size": 1}}\n{"dp_rank": 0}\n',
        native_jsonl(2).replace(b"forward-compute", b"warp-drive"),
        b"PAR1 truncated parquet",
    ]
    for i, body in enumerate(bad_bodies):
        r = http.post("/api/traces", params={"filename": f"bad{i}.jsonl"}, content=body, headers=AUTH)
        assert r.status_code in (400, 422), r.text
        assert r.json()["error"]["message"]
    after = http.get("/api/traces", headers=AUTH).json()
    assert after == listing
    tid = listing["items"][0]["trace_id"]
    assert http.get(f"/api/traces/{tid}", headers=AUTH).status_code == 200


# -- server-side paths ---------------------------------------------------------------------------


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path]:
    allowed = tmp_path / "allowed"
    outside = tmp_path / "outside"
    allowed.mkdir()
    outside.mkdir()
    (allowed / "job").mkdir()
    (allowed / "job" / "trace.jsonl").write_bytes(native_jsonl())
    (outside / "secret.jsonl").write_bytes(b"secret")
    return allowed.resolve(), outside.resolve()


def test_allowed_paths_resolve_to_real_files_inside(folders: tuple[Path, Path]) -> None:
    allowed, _ = folders
    assert resolve_allowed(str(allowed / "job"), (allowed,)) == [allowed / "job" / "trace.jsonl"]
    assert resolve_allowed("job/trace.jsonl", (allowed,)) == [allowed / "job" / "trace.jsonl"]


@pytest.mark.parametrize(
    "raw",
    [
        "{out}/secret.jsonl",
        "{allowed}/../outside/secret.jsonl",
        "../outside/secret.jsonl",
        "/etc/passwd",
        "{allowed}/link.jsonl",
        "{allowed}/linkdir",
        "{allowed}/job/*.jsonl",
        "{allowed}/missing.jsonl",
        "",
    ],
)
def test_traversal_symlink_escape_and_globs_are_refused(folders: tuple[Path, Path], raw: str) -> None:
    allowed, outside = folders
    (allowed / "link.jsonl").symlink_to(outside / "secret.jsonl")
    (allowed / "linkdir").symlink_to(outside, target_is_directory=True)
    with pytest.raises(PathNotAllowed):
        resolve_allowed(raw.format(out=outside, allowed=allowed), (allowed,))


def test_paths_outside_get_one_answer_whether_they_exist_or_not(folders: tuple[Path, Path]) -> None:
    allowed, outside = folders
    answers = []
    for name in ("secret.jsonl", "missing.jsonl"):
        with pytest.raises(PathNotAllowed) as err:
            resolve_allowed(str(outside / name), (allowed,))
        answers.append(str(err.value).replace(name, "NAME"))
    assert answers[0] == answers[1] and "outside the allowed folders" in answers[0]


def test_paths_are_refused_when_no_folder_is_allowed(folders: tuple[Path, Path]) -> None:
    allowed, _ = folders
    with pytest.raises(PathNotAllowed, match="--allow-dir"):
        resolve_allowed(str(allowed / "job"), ())


# -- settings ------------------------------------------------------------------------------------


def test_non_loopback_bind_needs_allowed_host_and_token(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="--allowed-host"):
        Settings(data_dir=tmp_path, host="0.0.0.0", token=TOKEN)
    with pytest.raises(SettingsError, match="--token-file"):
        Settings(data_dir=tmp_path, host="0.0.0.0", allowed_hosts=("lens.example",))
    ok = Settings(data_dir=tmp_path, host="0.0.0.0", allowed_hosts=("lens.example",), token=TOKEN)
    assert ok.host == "0.0.0.0"


def test_token_file_must_hold_a_real_token(tmp_path: Path) -> None:
    short = tmp_path / "short"
    short.write_text("abc\n")
    with pytest.raises(SettingsError, match="shorter"):
        Settings.build(data_dir=tmp_path, token_file=short)
    good = tmp_path / "good"
    good.write_text(TOKEN + "\n")
    assert Settings.build(data_dir=tmp_path, token_file=good).token == TOKEN


def test_an_upload_cut_off_mid_stream_leaves_nothing(http: httpx.Client, secured: Live) -> None:
    """A client killed mid-upload (socket closed after part of the declared body)."""
    import socket

    before = http.get("/api/traces", headers=AUTH).json()["total"]
    host, port = secured.url.removeprefix("http://").split(":")
    body = b'{"job": {"dp_size": 1, "pp_size": 1}}\n' + b"x" * 65536
    head = (
        f"POST /api/traces?filename=cut.jsonl HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Authorization: Bearer {TOKEN}\r\nContent-Length: {len(body) * 4}\r\n\r\n"
    )
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(head.encode() + body)
        tmp = secured.settings.data_dir / "tmp"
        deadline = time.monotonic() + 10
        while not list(tmp.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.02)  # wait until the server has started writing the upload
        assert list(tmp.iterdir()), "the upload reached the staging folder"
    # the socket is closed here, three quarters of the declared body never sent
    deadline = time.monotonic() + 10
    while list(tmp.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(tmp.iterdir()) == []
    assert http.get("/api/traces", headers=AUTH).json()["total"] == before


@pytest.mark.anyio
async def test_a_stalled_upload_times_out_with_408() -> None:
    import anyio
    from starlette.requests import Request

    from server.core.errors import ApiError
    from server.core.uploads import body_chunks

    sent = False

    async def receive() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": b"first chunk", "more_body": True}
        await anyio.sleep_forever()  # the client stops sending but keeps the connection
        raise AssertionError

    request = Request({"type": "http", "method": "POST", "headers": []}, receive)
    got = []
    with pytest.raises(ApiError) as err:
        async for chunk in body_chunks(request, idle_timeout=0.2):
            got.append(chunk)
    assert got == [b"first chunk"]
    assert err.value.status == 408 and err.value.code == "upload_timeout"


@pytest.mark.anyio
async def test_allowed_host_extends_the_allowlist_on_rest_and_mcp(tmp_path: Path) -> None:
    from server.app import create_app

    settings = Settings(data_dir=tmp_path, allowed_hosts=("lens.example", "other.example:9443"))
    app = create_app(settings)
    transport = httpx.ASGITransport(app=app)
    async with app.router.lifespan_context(app), httpx.AsyncClient(transport=transport) as c:
        ok = {"Origin": "https://lens.example"}
        assert (await c.get("http://lens.example:8000/api/traces", headers=ok)).status_code == 200
        assert (await c.get("http://other.example:9443/healthz")).status_code == 200
        assert (await c.get("http://other.example:9444/healthz")).status_code == 421, (
            "that name on its port only"
        )
        assert (await c.get("http://evil.example/healthz")).status_code == 421
        r = await c.post("http://lens.example:8000/mcp", json=INIT, headers={**MCP_HEADERS, **ok})
        assert r.status_code == 200, r.text
        r = await c.post(
            "http://lens.example:8000/mcp",
            json=INIT,
            headers={**MCP_HEADERS, "Origin": "http://evil.example"},
        )
        assert r.status_code == 403
