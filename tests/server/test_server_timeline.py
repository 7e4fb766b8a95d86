"""The timeline on every surface: REST over a real socket, the MCP tool and resource through the SDK
client, the CLI. (The trace-event format itself is checked in tests/engine/test_engine_timeline.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import numpy as np
import pytest
from lens_testing import Live
from mcp import Client
from mcp.types import ResourceLink

from diagnosers.readers import load_trace
from diagnosers.samples import artifact_trace
from server.cli import main
from server.core.runtime import LensHolder
from server.core.settings import Settings
from server.mcp.tools import build_mcp


@pytest.fixture(scope="module")
def http(live: Live) -> httpx.Client:
    with httpx.Client(base_url=live.url, timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def st_id(http: httpx.Client) -> str:
    items = http.get("/api/traces", params={"limit": 100}).json()["items"]
    return next(i["trace_id"] for i in items if i["summary"]["job"]["trial_name"] == "ST")


@pytest.fixture(scope="module")
def st_ops_per_step() -> dict[int, int]:
    steps = load_trace([artifact_trace("ST")]).ops.step
    values, counts = np.unique(steps, return_counts=True)
    return {int(s): int(c) for s, c in zip(values, counts, strict=True)}


def slices(doc: dict) -> int:
    return sum(1 for e in doc["traceEvents"] if e["ph"] == "X")


def test_rest_timeline_default_and_chosen_steps(
    http: httpx.Client, st_id: str, st_ops_per_step: dict[int, int]
) -> None:
    r = http.get(f"/api/traces/{st_id}/timeline.json")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")
    assert "attachment" in r.headers["content-disposition"]
    doc = r.json()
    chosen = [s["step"] for s in doc["otherData"]["steps"]]
    assert len(chosen) == 2 and {s["role"] for s in doc["otherData"]["steps"]} == {"worst", "typical"}
    assert slices(doc) == 2 * sum(st_ops_per_step[s] for s in chosen)
    # a second read is the stored document, byte for byte
    assert http.get(f"/api/traces/{st_id}/timeline.json").content == r.content

    some = sorted(st_ops_per_step)[:3]
    r = http.get(f"/api/traces/{st_id}/timeline.json", params={"steps": ",".join(map(str, some))})
    assert r.status_code == 200, r.text
    assert [s["step"] for s in r.json()["otherData"]["steps"]] == some
    assert slices(r.json()) == 2 * sum(st_ops_per_step[s] for s in some)


@pytest.mark.parametrize(
    ("steps", "status", "needle"),
    [
        ("5", 400, "step 5 is not in the trace"),
        ("a,b", 400, "steps='a,b'"),
        (",".join(str(i) for i in range(17)), 400, "not in the trace"),
    ],
)
def test_rest_timeline_bad_steps_are_400s_that_say_why(
    http: httpx.Client, st_id: str, steps: str, status: int, needle: str
) -> None:
    r = http.get(f"/api/traces/{st_id}/timeline.json", params={"steps": steps})
    assert r.status_code == status, r.text
    assert needle in r.json()["error"]["message"]


def test_rest_timeline_too_many_steps_and_unknown_trace(
    http: httpx.Client, st_id: str, st_ops_per_step: dict[int, int]
) -> None:
    many = ",".join(str(s) for s in sorted(st_ops_per_step)[:17])
    r = http.get(f"/api/traces/{st_id}/timeline.json", params={"steps": many})
    assert r.status_code == 400 and "at most 16 steps" in r.json()["error"]["message"]
    r = http.get("/api/traces/nope/timeline.json")
    assert r.status_code == 404


def test_rest_whatif_include_timeline_is_on_demand(http: httpx.Client, st_id: str) -> None:
    plain = http.get(f"/api/traces/{st_id}/whatif").json()
    assert "timeline" not in plain
    r = http.get(f"/api/traces/{st_id}/whatif", params={"include": "timeline"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert {k: v for k, v in body.items() if k != "timeline"} == plain
    tl = body["timeline"]
    assert len(tl["critical_paths"]) == 2 * len(plain["steps"])
    assert len(tl["breakdown"]) == 8 * len(plain["steps"])
    r = http.get(f"/api/traces/{st_id}/whatif", params={"include": "bogus"})
    assert r.status_code == 400 and "bogus" in r.json()["error"]["message"]
    assert "/api/traces/{trace_id}/timeline.json" in http.get("/api/openapi.json").json()["paths"]


@pytest.mark.anyio
async def test_mcp_export_timeline_answers_a_link_and_its_size(tmp_path: Path) -> None:
    folder = artifact_trace("ST").parent.resolve()
    settings = Settings(data_dir=tmp_path / "data", allow_dirs=(folder,))
    async with Client(build_mcp(settings, LensHolder())) as c:
        up = await c.call_tool("upload_trace", {"path": "trace-ST.parquet"})
        tid = up.structured_content["trace_id"]
        r = await c.call_tool("export_timeline", {"trace_id": tid})
        assert not r.is_error, r.content
        links = [b for b in r.content if isinstance(b, ResourceLink)]
        assert len(links) == 1
        link = links[0]
        view = r.structured_content
        assert str(link.uri) == view["uri"] == f"trace://{tid}/timeline/default"
        # never the events inline: the answer is small, the document is not
        text = " ".join(getattr(b, "text", "") for b in r.content)
        assert len(text) < 5_000 and "traceEvents" not in text
        res = await c.read_resource(view["uri"])
        body = res.contents[0].text
        assert link.size == view["size_bytes"] == len(body.encode()) > 100_000
        doc = json.loads(body)
        assert [s["step"] for s in doc["otherData"]["steps"]] == view["steps"]
        assert {p["run"] for p in view["critical_paths"]} == {"actual", "straggler-free"}

        chosen = view["steps"][:1]
        r = await c.call_tool("export_timeline", {"trace_id": tid, "steps": chosen})
        assert r.structured_content["steps"] == chosen
        assert r.structured_content["uri"].endswith(f"/timeline/{chosen[0]}")
        r = await c.call_tool("export_timeline", {"trace_id": tid, "steps": [5]})
        assert r.is_error and "step 5 is not in the trace" in r.content[0].text
        templates = {t.uri_template for t in (await c.list_resource_templates()).resource_templates}
        assert "trace://{trace_id}/timeline/{steps}" in templates


def test_cli_timeline_writes_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "tl.json"
    assert main(["timeline", str(artifact_trace("ST")), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert f"wrote {out}" in printed and "critical path (actual)" in printed
    assert "critical path (straggler-free)" in printed and "straggler-wait" in printed
    assert slices(doc) > 0 and doc["displayTimeUnit"] == "ms"

    assert main(["timeline", str(artifact_trace("ST")), "-o", str(out), "--steps", "5"]) == 2
    assert "step 5 is not in the trace" in capsys.readouterr().err
    assert main(["timeline", str(artifact_trace("ST")), "-o", str(out), "--steps", "23", "--json"]) == 0
    analysis = json.loads(capsys.readouterr().out)
    assert analysis["steps"] == [23]


def test_cli_analyze_include_timeline(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(artifact_trace("ST")), "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert "timeline" not in plain
    assert main(["analyze", str(artifact_trace("ST")), "--json", "--include", "timeline"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["timeline"]["straggler_free_step_time"] == pytest.approx(
        doc["step_times"]["ideal"][str(doc["steps"][0])]
    )
