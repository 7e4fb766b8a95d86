"""Live windows end to end on real HTTP: the client streams recorded per-rank traces, the server
assembles, analyses in the background, lists them per job and compares two windows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from loopback import Live, LiveServer, wait_for

from server.core.settings import Settings
from server.ingest_client import LensReporter

EXAMPLES = Path(__file__).resolve().parents[1] / "data" / "kineto_example"
HELDOUT = Path(__file__).resolve().parents[1] / "data" / "kineto_heldout"
TOKEN = "service-token-0123456789"


@pytest.fixture(scope="module")
def lens(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("lens"), token=TOKEN, grace_s=3.0, poll_s=0.1)
    with LiveServer(settings) as live:
        yield live


def send_windows(
    url: str,
    job: str,
    window: str,
    folder: Path,
    ranks: list[int],
    tmp: Path,
    world: int = 4,
    token: str | None = TOKEN,
) -> None:
    """Each rank's own reporter streams its recorded file, as the ranks of a job would."""
    reps = []
    for r in ranks:
        rep = LensReporter(url, job, rank=r, world_size=world, token=token, out_dir=tmp)
        rep.submit(folder / f"kineto_rank{r}.json.gz", window)
        reps.append(rep)
    for rep in reps:
        assert rep.close(30)
        assert all(o.ok for o in rep.outcomes), rep.outcomes


def api(lens: Live, path: str, **params: str) -> httpx.Response:
    return httpx.get(lens.url + path, params=params, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)


def done(lens: Live, job: str, window: str) -> dict:
    def check() -> dict | None:
        w = api(lens, f"/api/jobs/{job}/windows/{window}").json()
        return w if w["status"] in ("done", "failed") else None

    return wait_for(check, 120)


def test_windows_assemble_analyse_and_compare(lens: Live, tmp_path: Path) -> None:
    send_windows(lens.url, "llama-run7", "w1", EXAMPLES / "slow-rank" / "traces", [0, 1, 2, 3], tmp_path)
    w1 = done(lens, "llama-run7", "w1")
    assert w1["status"] == "done", w1
    assert w1["ranks_received"] == 4 and w1["missing_ranks"] == [] and w1["trace_id"]
    assert w1["slowdown"] > 1.1 and w1["causes"], w1
    assert w1["fidelity"] in ("good", "degraded", "unreliable")
    send_windows(lens.url, "llama-run7", "w2", EXAMPLES / "baseline" / "traces", [0, 1, 2, 3], tmp_path)
    w2 = done(lens, "llama-run7", "w2")
    assert w2["status"] == "done"
    jobs = api(lens, "/api/jobs").json()
    assert [j["job"] for j in jobs["jobs"]] == ["llama-run7"] and jobs["jobs"][0]["windows"] == 2
    job = api(lens, "/api/jobs/llama-run7").json()
    assert [w["window"] for w in job["windows"]] == ["w2", "w1"] and job["trend"]["windows"] == 2
    cmp = api(lens, "/api/jobs/llama-run7/compare", before="w1", after="w2").json()
    assert cmp["improved"] and cmp["slowdown_after"] < cmp["slowdown_before"]
    assert any(c["change"] == "gone" for c in cmp["causes"]), cmp["causes"]
    worst = cmp["workers"][0]
    assert (worst["dp_rank"], worst["pp_rank"]) == (1, 0) and worst["change"] < 0
    assert cmp["remedies"] and cmp["remedies"][0]["actual_speedup"] > 1
    md = api(lens, "/api/jobs/llama-run7/windows/w1/diagnosis.md")
    assert md.headers["content-type"].startswith("text/markdown") and "**S = " in md.text
    # the web index lists the watched job, linked to its latest window's trace page
    index = api(lens, "/")
    assert index.status_code == 200 and 'id="jobs"' in index.text
    assert "llama-run7" in index.text and f'href="/traces/{w2["trace_id"]}"' in index.text


def test_grace_period_names_the_missing_rank(lens: Live, tmp_path: Path) -> None:
    dp8 = HELDOUT / "slow-rank-dp8" / "traces"
    send_windows(lens.url, "partial", "w1", dp8, [0, 1, 2, 4, 5, 6], tmp_path, world=8)
    w = api(lens, "/api/jobs/partial/windows/w1").json()
    assert w["status"] == "receiving" and w["missing_ranks"] == [3, 7]
    w = done(lens, "partial", "w1")
    assert w["status"] == "done" and w["missing_ranks"] == [3, 7]
    assert "ranks 3, 7 of 8 did not arrive within the grace period" in " ".join(w["notes"]), w
    # a pipeline window the reader cannot read without a rank fails, naming the missing rank
    send_windows(lens.url, "partial", "w2", EXAMPLES / "slow-rank" / "traces", [0, 1, 2], tmp_path)
    w = done(lens, "partial", "w2")
    assert w["status"] == "failed" and w["reason"].startswith("ranks 3 of 4 did not arrive"), w
    late = httpx.put(
        lens.url + "/api/jobs/partial/windows/w1/ranks/3",
        content=b"{}",
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert late.status_code == 409 and "new window id" in late.json()["error"]["message"]


def test_bad_ingestion_requests_are_4xx(lens: Live) -> None:
    h = {"Authorization": f"Bearer {TOKEN}"}
    assert (
        httpx.put(lens.url + "/api/jobs/bad%20name/windows/w/ranks/0", content=b"x", headers=h).status_code
        == 400
    )
    assert httpx.put(lens.url + "/api/jobs/j/windows/w/ranks/x", content=b"x", headers=h).status_code == 400
    r = httpx.put(lens.url + "/api/jobs/j/windows/w/ranks/5?world_size=4", content=b"x", headers=h)
    assert r.status_code == 400 and "world_size=4" in r.json()["error"]["message"]
    assert httpx.put(lens.url + "/api/jobs/j/windows/w/ranks/0", content=b"x").status_code == 401
    assert api(lens, "/api/jobs/nope").status_code == 404
    assert api(lens, "/api/jobs/llama-run7/compare", before="w1").status_code == 400


@pytest.mark.anyio
async def test_mcp_tools_over_real_http(lens: Live) -> None:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        httpx2.AsyncClient(headers=auth) as hc,
        Client(streamable_http_client(f"{lens.url}/mcp", http_client=hc)) as c,
    ):
        names = {t.name for t in (await c.list_tools()).tools}
        assert {"list_jobs", "get_job", "get_window", "compare_windows", "list_alerts", "get_alert"} <= names
        jobs = (await c.call_tool("list_jobs", {"pattern": "llama-*"})).structured_content
        assert [j["job"] for j in jobs["jobs"]] == ["llama-run7"]
        job = (await c.call_tool("get_job", {"job": "llama-run7", "limit": 5})).structured_content
        assert [w["status"] for w in job["windows"]] == ["done", "done"]
        win = (await c.call_tool("get_window", {"job": "llama-run7", "window": "w1"})).structured_content
        assert win["status"] == "done" and win["summary"]["causes"]
        cmp = await c.call_tool("compare_windows", {"job": "llama-run7", "before": "w1", "after": "w2"})
        assert not cmp.is_error and cmp.structured_content["improved"]
        missing = await c.call_tool("get_job", {"job": "no-such-job"})
        assert missing.is_error and "list_jobs" in missing.content[0].text
        bad = await c.call_tool("get_job", {"job": "x", "limit": 1000})
        assert bad.is_error


def test_openapi_documents_the_monitoring_routes(lens: Live) -> None:
    doc = api(lens, "/api/openapi.json").json()
    assert {"/api/jobs", "/api/jobs/{job}/compare", "/api/alerts/{alert_id}"} <= set(doc["paths"])
    assert "put" in doc["paths"]["/api/jobs/{job}/windows/{window}/ranks/{rank}"]
    assert {"JobList", "Comparison", "AlertDetail"} <= set(doc["components"]["schemas"])
