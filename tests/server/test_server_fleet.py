"""Stored fleet reports over MCP (get_fleet_report, list_fleet_reports) and REST (/api/fleet):
real report folders written by the fleet code, a real server on loopback, the real MCP client."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from budget_calls import over_budget
from lens_testing import Live, LiveServer
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from diagnosers.fleet import empty_row, fleet_statistics
from server.core.settings import Settings


def _write_report(folder: Path, n_straggling: int, n_healthy: int) -> None:
    rows = [empty_row(f"s{i}", status="ok", slowdown=1.5, straggling=True, wasted_fraction=1 / 3, gpus=128,
                      fidelity="good", cause_1="stage-imbalance", cause_1_gain=1.4)
            for i in range(n_straggling)]
    rows += [empty_row(f"h{i}", status="ok", slowdown=1.0, straggling=False, wasted_fraction=0.0, gpus=64,
                       fidelity="good") for i in range(n_healthy)]
    rows.append(empty_row("bad", status="failed", error="TraceError: cannot parse"))
    folder.mkdir(parents=True)
    (folder / "report.json").write_text(fleet_statistics(rows).model_dump_json(), encoding="utf-8")


@pytest.fixture(scope="module")
def fleet_live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    root = tmp_path_factory.mktemp("fleets")
    _write_report(root / "march", 1, 3)
    _write_report(root / "april", 2, 2)
    (root / "broken").mkdir()
    (root / "broken" / "report.json").write_text("{not json", encoding="utf-8")
    settings = Settings(data_dir=tmp_path_factory.mktemp("lens-fleet"), fleet_dirs=(root,))
    with LiveServer(settings) as server:
        yield server


def test_rest_lists_and_reads_stored_fleet_reports(fleet_live: Live) -> None:
    with httpx.Client(base_url=fleet_live.url, timeout=30) as http:
        listing = http.get("/api/fleet").json()
        assert [i["name"] for i in listing["items"]] == ["april", "broken", "march"]
        assert listing["items"][0]["jobs"] == 5 and listing["items"][1]["jobs"] is None
        r = http.get("/api/fleet/march")
        assert r.status_code == 200
        body = r.json()
        assert body["name"] == "march" and body["report"]["straggling_share"] == pytest.approx(0.25)
        assert body["report"]["failures"] == {"bad": "TraceError: cannot parse"}
        missing = http.get("/api/fleet/june")
        assert missing.status_code == 404 and "april" in missing.json()["error"]["message"]
        broken = http.get("/api/fleet/broken")
        assert broken.status_code == 422 and "not a fleet report" in broken.json()["error"]["message"]
        assert "/api/fleet/{name}" in http.get("/api/openapi.json").json()["paths"]


@pytest.mark.anyio
async def test_mcp_tool_reads_a_stored_fleet_report(fleet_live: Live) -> None:
    async with Client(streamable_http_client(fleet_live.mcp_url)) as c:
        r = await c.call_tool("get_fleet_report", {"name": "april"})
        assert not r.is_error
        rep = r.structured_content["report"]
        assert rep["straggling_share"] == pytest.approx(0.5)
        assert rep["cause_mix"][0]["cause"] == "stage-imbalance" and rep["counts"]["failed"] == 1
        ambiguous = await c.call_tool("get_fleet_report", {})
        assert ambiguous.is_error and "several fleet reports" in ambiguous.content[0].text
        names = await c.call_tool("list_fleet_reports", {})
        assert names.structured_content["total"] == 3
        assert over_budget("get_fleet_report", r) is None
        assert over_budget("list_fleet_reports", names) is None


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_mcp_answer_lists_at_most_fifty_failed_jobs(tmp_path: Path) -> None:
    from server.core.fleet_reports import load_report
    from server.mcp.fleet import MAX_LISTED, bounded

    rows = [empty_row(f"f{i:03d}", status="failed", error="timed out after 600 s") for i in range(120)]
    rows.append(empty_row("ok", status="ok", slowdown=1.0, straggling=False, wasted_fraction=0.0,
                          fidelity="good"))
    (tmp_path / "big").mkdir()
    (tmp_path / "big" / "report.json").write_text(fleet_statistics(rows).model_dump_json(), encoding="utf-8")
    stored = load_report(Settings(data_dir=tmp_path / "data", fleet_dirs=(tmp_path,)), "big")
    assert len(stored.report.failures) == 120
    cut = bounded(stored)
    assert len(cut.report.failures) == MAX_LISTED and "120 failed jobs" in cut.report.notes[-1]
    assert cut.report.counts["failed"] == 120
