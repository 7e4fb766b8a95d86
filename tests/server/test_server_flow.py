"""The assistant-style flow over HTTP on a real socket: upload ST -> diagnose (with progress) ->
stage imbalance at the last stage, a PNG heatmap, similar incidents; plus the analysis REST routes."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import httpx
import pytest
from lens_testing import Live
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def st_id(live: Live, st_files: list[Path]) -> str:
    files = [("files", (p.name, p.read_bytes())) for p in st_files]
    r = httpx.post(f"{live.url}/api/traces", files=files, timeout=60)
    assert r.status_code in (200, 201), r.text  # 200: the preloaded sample has the same bytes
    return str(r.json()["trace_id"])


@pytest.mark.anyio
async def test_assistant_flow_finds_the_heavy_last_stage(live: Live, st_id: str) -> None:
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(p: float, total: float | None, message: str | None) -> None:
        progress.append((p, total, message))

    async with Client(streamable_http_client(live.mcp_url)) as c:
        d = await c.call_tool("diagnose", {"trace_id": st_id}, progress_callback=on_progress)
        assert not d.is_error, d.content
        diag = d.structured_content
        assert diag["straggling"] and diag["slowdown"] > 1.1
        top = diag["causes"][0]
        assert top["id"] == "stage-imbalance"
        assert top["location"]["pp_ranks"] == [3], "the last of 4 stages"
        assert diag["remedies"] and diag["remedies"][0]["predicted_speedup"] > 1.0
        assert diag["similar_incidents"], "a stage-imbalance diagnosis has look-alike incidents"
        assert diag["full_diagnosis"] == f"/api/traces/{st_id}/diagnosis"
        fractions = [p for p, _, _ in progress]
        assert len(fractions) >= 3 and fractions == sorted(fractions) and fractions[-1] == 1.0

        h = await c.call_tool("get_heatmap", {"trace_id": st_id})
        assert not h.is_error
        image = next(b for b in h.content if b.type == "image")
        assert image.mime_type == "image/png" and base64.b64decode(image.data).startswith(PNG_MAGIC)
        assert h.structured_content["hottest"]["pp"] == "3"
        assert "pp   3" in h.structured_content["grid"]

        s = await c.call_tool("similar_incidents", {"trace_id": st_id, "limit": 3})
        assert not s.is_error
        hits = s.structured_content["results"]
        assert 1 <= len(hits) <= 3 and any("stage-imbalance" in h["causes"] for h in hits)
        case = await c.call_tool("get_incident", {"id": hits[0]["id"]})
        assert case.structured_content["id"] == hits[0]["id"]
        res = await c.read_resource(f"incident://{hits[0]['id']}")
        assert hits[0]["id"] in res.contents[0].text


@pytest.mark.anyio
async def test_whatif_tool_answers_report_and_scenario_bounded(live: Live, st_id: str) -> None:
    async with Client(streamable_http_client(live.mcp_url)) as c:
        std = await c.call_tool("run_whatif", {"trace_id": st_id})
        body = std.structured_content
        assert body["scenario"] is None and body["slowdown"] > 1.1
        assert body["truncated"] and body["omitted"], "ST has 32 steps; per-step tables are capped"
        assert len(body["report"]["attribution"]["by_stage_per_step"]) <= 8
        sc = await c.call_tool("run_whatif", {"trace_id": st_id, "pp_ranks": [3]})
        assert sc.structured_content["scenario"]["speedup"] > 1.1
        assert sc.structured_content["scenario"]["selector"]["pp_ranks"] == [3]
        free = await c.call_tool("run_whatif", {"trace_id": st_id, "free_comm": True})
        assert free.structured_content["scenario"]["free_comm"] is True
        bad = await c.call_tool("run_whatif", {"trace_id": st_id, "optypes": ["warp-drive"]})
        assert bad.is_error and "warp-drive" in bad.content[0].text
        # ranks or steps the job does not have would select nothing and answer speedup 1.0
        for selector, expect in (
            ({"pp_ranks": [9]}, "pp_ranks [9] outside the job: its pp size is 4 (ranks 0-3)"),
            ({"dp_ranks": [0, 2]}, "dp_ranks [2] outside the job: its dp size is 2"),
            ({"steps": [23, 24]}, "steps [24] are not traced; traced steps: 23, 25, 33"),
        ):
            off = await c.call_tool("run_whatif", {"trace_id": st_id, **selector})
            assert off.is_error and expect in off.content[0].text, off.content[0].text
        pat = await c.call_tool("classify_patterns", {"trace_id": st_id})
        assert pat.structured_content["causes"][0]["pattern"]["spatial"] == "one-stage"
        rem = await c.call_tool("suggest_remedies", {"trace_id": st_id})
        assert rem.structured_content["total"] >= 1
        step = await c.call_tool("get_heatmap", {"trace_id": st_id, "step": 999999})
        assert step.is_error and "traced steps" in step.content[0].text
        full = await c.read_resource(f"trace://{st_id}/diagnosis")
        assert json.loads(full.contents[0].text)["causes"][0]["id"] == "stage-imbalance"
        report = await c.read_resource(f"trace://{st_id}/whatif")
        assert json.loads(report.contents[0].text)["job"]["pp"] == 4


@pytest.mark.anyio
async def test_incident_tools(live: Live) -> None:
    async with Client(streamable_http_client(live.mcp_url)) as c:
        found = await c.call_tool("search_incidents", {"query": "garbage collection pauses", "limit": 3})
        assert found.structured_content["total"] >= 1
        assert len(found.structured_content["results"]) <= 3
        # every filter reaches the library: a search narrowed by cause and years
        narrowed = await c.call_tool(
            "search_incidents",
            {"query": "slow training", "cause": "faulty-machine", "year_from": 2024, "year_to": 2024},
        )
        hits = narrowed.structured_content["results"]
        assert hits and all("faulty-machine" in h["causes"] for h in hits)
        everything = await c.call_tool("search_incidents", {"query": "slow training"})
        assert narrowed.structured_content["total"] < everything.structured_content["total"]
        listed = await c.call_tool("list_incidents", {"cause": "gc-pause", "limit": 2})
        assert all("gc-pause" in h["causes"] for h in listed.structured_content["results"])
        v = await c.call_tool("vocab", {})
        topic = v.structured_content["topics"][0]["name"]
        t = await c.call_tool("get_topic", {"name": topic})
        assert t.structured_content["name"] == topic
        bad = await c.call_tool("list_incidents", {"cause": "gremlins"})
        assert bad.is_error
        missing = await c.call_tool("get_incident", {"id": "IL-9999"})
        assert missing.is_error and "IL-9999" in missing.content[0].text
        txt = await c.call_tool("similar_incidents", {"text": "the last pipeline stage is slow"})
        assert txt.structured_content["results"]
        both = await c.call_tool("similar_incidents", {"text": "x", "case_id": "IL-0001"})
        assert both.is_error and "exactly one" in both.content[0].text


def test_rest_analysis_routes(live: Live, st_id: str) -> None:
    with httpx.Client(base_url=live.url, timeout=60) as http:
        report = http.get(f"/api/traces/{st_id}/whatif").json()
        assert report["job"]["pp"] == 4 and len(report["step_slowdown"]) == len(report["steps"])
        diag = http.get(f"/api/traces/{st_id}/diagnosis").json()
        assert diag["causes"][0]["id"] == "stage-imbalance"
        png = http.get(f"/api/traces/{st_id}/heatmap.png")
        assert png.headers["content-type"] == "image/png" and png.content.startswith(PNG_MAGIC)
        step = report["steps"][0]
        assert http.get(f"/api/traces/{st_id}/heatmap.png", params={"step": step}).content.startswith(
            PNG_MAGIC
        )
        info = http.get(f"/api/traces/{st_id}").json()
        assert {"whatif", "diagnosis"} <= set(info["cached"])


def test_rest_incident_routes(live: Live) -> None:
    with httpx.Client(base_url=live.url, timeout=60) as http:
        found = http.get("/api/cases", params={"q": "pipeline stage imbalance", "limit": 2}).json()
        assert found["total"] >= 1 and len(found["results"]) <= 2
        cid = found["results"][0]["id"]
        assert http.get(f"/api/cases/{cid}").json()["id"] == cid
        sim = http.get(f"/api/cases/{cid}/similar", params={"limit": 3}).json()
        assert cid not in [h["id"] for h in sim["results"]]
        listed = http.get("/api/cases", params={"cause": "gc-pause"}).json()
        assert all("gc-pause" in h["causes"] for h in listed["results"])
        vocab = http.get("/api/vocab").json()
        topic = vocab["topics"][0]["name"]
        assert http.get(f"/api/topics/{topic}").json()["name"] == topic
        for path, status in (("/api/cases/IL-9999", 404), ("/api/topics/nope-nope", 404)):
            r = http.get(path)
            assert r.status_code == status and r.json()["error"]["code"] == "not_found"
        r = http.get("/api/cases", params={"cause": "gremlins"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "bad_filter"


def test_reports_survive_a_restart(live: Live, st_id: str, tmp_path: Path) -> None:
    """A second server on the same data folder answers from the cached results without recomputing."""
    from lens_testing import LiveServer

    from server.core.settings import Settings

    with httpx.Client(base_url=live.url, timeout=60) as http:
        assert (
            "diagnosis" in http.get(f"/api/traces/{st_id}").json()["cached"]
            or http.get(f"/api/traces/{st_id}/diagnosis").status_code == 200
        )
    settings = Settings(data_dir=live.settings.data_dir)
    with LiveServer(settings) as second, httpx.Client(base_url=second.url, timeout=60) as http:
        info = http.get(f"/api/traces/{st_id}").json()
        assert {"whatif", "diagnosis"} <= set(info["cached"])
        assert http.get(f"/api/traces/{st_id}/diagnosis").json()["causes"][0]["id"] == "stage-imbalance"
