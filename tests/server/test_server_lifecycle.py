"""Deleting traces (REST and MCP, guarded like uploads) and retention (at start, periodically)."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from lens_testing import TOKEN, Live, LiveServer, native_jsonl
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from server.core.lifecycle import expire
from server.core.runtime import open_lens
from server.core.settings import Settings

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def upload(live: Live, tag: str, headers: dict[str, str] | None = None) -> str:
    r = httpx.post(
        f"{live.url}/api/traces?filename={tag}.jsonl",
        content=native_jsonl(2, tag=tag),
        headers=headers or {},
        timeout=60,  # an upload is parsed and stored before the reply: slow on a loaded host
    )
    assert r.status_code == 201, r.text
    return str(r.json()["trace_id"])


def test_rest_delete_removes_one_trace_and_nothing_else(secured: Live) -> None:
    keep, gone = upload(secured, "keep-1", AUTH), upload(secured, "gone-1", AUTH)
    data = secured.settings.data_dir
    assert httpx.get(f"{secured.url}/api/traces/{keep}/whatif", headers=AUTH).status_code == 200
    assert httpx.get(f"{secured.url}/api/traces/{gone}/whatif", headers=AUTH).status_code == 200
    # guarded like uploads: the token, and a foreign Origin is refused
    assert httpx.delete(f"{secured.url}/api/traces/{gone}").status_code == 401
    r = httpx.delete(f"{secured.url}/api/traces/{gone}", headers={**AUTH, "Origin": "http://evil.example"})
    assert r.status_code == 403
    r = httpx.delete(f"{secured.url}/api/traces/{gone}", headers=AUTH)
    assert r.status_code == 200 and r.json() == {"trace_id": gone, "deleted": True}
    assert httpx.get(f"{secured.url}/api/traces/{gone}", headers=AUTH).status_code == 404
    assert httpx.delete(f"{secured.url}/api/traces/{gone}", headers=AUTH).status_code == 404
    assert not (data / "traces" / gone).exists()
    with sqlite3.connect(data / "lens.sqlite3") as db:
        assert db.execute("SELECT COUNT(*) FROM results WHERE trace_id = ?", (gone,)).fetchone()[0] == 0
        assert db.execute("SELECT COUNT(*) FROM results WHERE trace_id = ?", (keep,)).fetchone()[0] > 0
    assert (data / "traces" / keep).is_dir()
    r = httpx.get(f"{secured.url}/api/traces/{keep}", headers=AUTH)
    assert r.status_code == 200 and "whatif" in r.json()["cached"]
    # the same content uploads again as a new trace
    assert upload(secured, "gone-1", AUTH) != gone


@pytest.mark.anyio
async def test_mcp_delete_trace(live: Live) -> None:
    tid = upload(live, "mcp-del")
    async with Client(streamable_http_client(live.mcp_url)) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        assert tools["delete_trace"].annotations.destructive_hint is True
        r = await c.call_tool("delete_trace", {"trace_id": tid})
        assert not r.is_error and r.structured_content == {"trace_id": tid, "deleted": True}
        r = await c.call_tool("describe_trace", {"trace_id": tid})
        assert r.is_error and "no trace" in r.content[0].text
        r = await c.call_tool("delete_trace", {"trace_id": tid})
        assert r.is_error and "no trace" in r.content[0].text


def _age(data: Path, trace_id: str, days: float) -> None:
    stamp = (datetime.now(UTC) - timedelta(days=days)).isoformat(timespec="seconds")
    with sqlite3.connect(data / "lens.sqlite3") as db:
        db.execute("UPDATE traces SET created_at = ? WHERE id = ?", (stamp, trace_id))


def test_retention_deletes_old_traces_at_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with LiveServer(Settings(data_dir=data)) as live:
        old, new = upload(live, "old"), upload(live, "new")
    _age(data, old, 10)
    _age(data, new, 1)
    with LiveServer(Settings(data_dir=data, retention_days=7)) as live:
        # a generous timeout: the first request after start-up can queue behind it on a loaded host
        ids = {t["trace_id"] for t in httpx.get(f"{live.url}/api/traces", timeout=60).json()["items"]}
    assert ids == {new}
    assert not (data / "traces" / old).exists() and (data / "traces" / new).is_dir()


@pytest.mark.anyio
async def test_expire_uses_the_clock_it_is_given(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "d", retention_days=2, workers=0)
    async with open_lens(settings) as lens:
        r: Any = await anyio.to_thread.run_sync(lambda: lens.ingest(*_staged(lens, "x")))
        assert expire(lens) == []  # just stored
        assert expire(lens, now=datetime.now(UTC) + timedelta(days=3)) == [r.trace_id]
        assert lens.store.get(r.trace_id) is None


def _staged(lens: Any, tag: str) -> tuple[Any, ...]:
    from server.core.staging import UploadBudget, write_bytes

    staging = lens.store.staging_dir()
    f = write_bytes(staging, f"{tag}.jsonl", native_jsonl(2, tag=tag), UploadBudget(1 << 20, 1 << 22))
    return staging, [f], {}, tag


def test_retention_days_must_be_positive(tmp_path: Path) -> None:
    from server.core.settings import SettingsError

    with pytest.raises(SettingsError, match="--retention-days must be positive"):
        Settings(data_dir=tmp_path, retention_days=0)
