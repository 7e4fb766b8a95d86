"""The pages and the MCP App in a real headless Chromium (Debian's, through Playwright).

Plain sync tests (Playwright's sync API refuses to run inside an event loop); one browser for the
session. Each test collects console errors and uncaught exceptions and fails on any.
"""

from __future__ import annotations

import concurrent.futures
import functools
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from playwright.sync_api import Page, expect
from web_testing import native_trace

from tests._support.live import Live

HERE = Path(__file__).parent


@pytest.fixture
def errors(page: Page) -> Iterator[list[str]]:
    seen: list[str] = []
    page.on("console", lambda m: seen.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: seen.append(f"pageerror: {e}"))
    yield seen
    assert seen == [], seen


def test_index_trace_page_heatmap_hover_step_and_worker(
    live: Live, page: Page, errors: list[str], artefacts: Path
) -> None:
    page.goto(live.url + "/")
    row = page.locator("#traces tbody tr", has_text="sample ST")
    expect(row).to_have_count(1)
    page.screenshot(path=str(artefacts / "index.png"), full_page=True)
    row.locator("a").first.click()
    expect(page.locator("#summary")).to_contain_text("S = ")
    cells = page.locator("#heatmap rect.hm-cell")
    expect(cells).to_have_count(8)  # ST: dp 2 x pp 4
    page.screenshot(path=str(artefacts / "trace.png"), full_page=True)

    # hover: the tooltip names the cell and its S_w, the same value the cell was drawn from
    hot = page.locator('#heatmap rect.hm-cell[data-r="3"][data-c="1"]')
    value = float(hot.get_attribute("data-v") or "nan")
    hot.hover()
    tip = page.locator("#heatmap-tip")
    expect(tip).to_be_visible()
    expect(tip).to_contain_text("PP 3")
    expect(tip).to_contain_text(f"S_w = {value:.3f}")
    expect(tip).to_contain_text("host ")
    assert value > 1.15, "ST's last stage is the slow one"

    # the step selector swaps in that step's map
    before = [c.get_attribute("data-v") for c in cells.all()]
    title = page.locator("[data-role=title]")
    page.select_option("[data-role=step]", index=1)
    expect(title).to_contain_text("step ")
    after = [c.get_attribute("data-v") for c in page.locator("#heatmap rect.hm-cell").all()]
    assert after != before
    # the adaptive scale says its range
    page.select_option("[data-role=scale]", "adaptive")
    expect(page.locator("[data-role=note]")).to_contain_text("adaptive")

    # click: that worker's per-step values
    page.locator('#heatmap rect.hm-cell[data-r="3"][data-c="0"]').click()
    expect(page.locator("#worker-panel h3")).to_contain_text("Worker PP 3, DP 0")
    expect(page.locator("#worker-panel li").first).to_contain_text("step ")
    expect(page.locator("#step-chart svg rect")).to_have_count(32)
    page.screenshot(path=str(artefacts / "trace-step.png"), full_page=True)


def test_upload_through_the_form_lands_and_shows_its_diagnosis(
    live: Live, page: Page, errors: list[str], artefacts: Path, tmp_path: Path
) -> None:
    trace = tmp_path / "two-workers.jsonl"
    trace.write_bytes(native_trace())
    page.goto(live.url + "/")
    page.set_input_files("#upload-form input[type=file]", str(trace))
    expect(page.locator("#upload-files li")).to_contain_text("two-workers.jsonl")
    page.click("#upload-form button[type=submit]")
    page.wait_for_url("**/traces/*", timeout=60_000)
    expect(page.locator("#summary")).to_contain_text("S = ", timeout=60_000)
    expect(page.locator("#heatmap rect.hm-cell")).to_have_count(2)
    page.screenshot(path=str(artefacts / "uploaded.png"), full_page=True)
    page.goto(live.url + "/?q=two-workers")
    expect(page.locator("#traces tbody tr")).to_have_count(1)
    expect(page.locator("#traces tbody tr")).not_to_contain_text("not diagnosed")


def test_a_bad_upload_shows_the_rest_error(live: Live, page: Page, tmp_path: Path) -> None:
    bad = tmp_path / "notes.jsonl"
    bad.write_text('{"format": "straggler-lens/native", "version": 1}\n{"dp_rank": "x"}\n')
    page.goto(live.url + "/")
    page.set_input_files("#upload-form input[type=file]", str(bad))
    page.click("#upload-form button[type=submit]")
    expect(page.locator("#upload-message.error")).to_contain_text("trace", timeout=30_000)


async def _diagnose_with_apps(url: str) -> tuple[dict, str]:
    from mcp.client import Client, advertise

    apps = advertise("io.modelcontextprotocol/ui", {"mimeTypes": ["text/html;profile=mcp-app"]})
    async with Client(url + "/mcp", extensions=[apps]) as c:
        items = (await c.call_tool("list_traces", {})).structured_content["items"]
        tid = next(t["trace_id"] for t in items if t["name"].startswith("sample ST"))
        result = await c.call_tool("diagnose", {"trace_id": tid})
        tool = next(t for t in (await c.list_tools()).tools if t.name == "diagnose")
        uri = tool.meta["ui"]["resourceUri"]
        body = (await c.read_resource(uri)).contents[0]
        assert body.mime_type == "text/html;profile=mcp-app"
        return result.model_dump(mode="json", by_alias=True, exclude_none=True), body.text


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def test_the_mcp_app_renders_a_real_diagnose_result_in_a_host_page(
    live: Live, page: Page, errors: list[str], artefacts: Path, tmp_path: Path
) -> None:
    # Playwright's sync API keeps an event loop in this thread: the MCP client runs in another
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        result, html = pool.submit(anyio.run, _diagnose_with_apps, live.url).result(timeout=120)
    site = tmp_path / "host"
    site.mkdir()
    (site / "app.html").write_text(html, encoding="utf-8")
    (site / "result.json").write_text(json.dumps(result), encoding="utf-8")
    for name in ("host.html", "host.js"):
        (site / name).write_text((HERE / name).read_text(encoding="utf-8"), encoding="utf-8")
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        page.goto(f"http://127.0.0.1:{srv.server_address[1]}/host.html")
        app = page.frame_locator("#app")
        expect(app.locator("body[data-rendered=true]")).to_have_count(1, timeout=60_000)
        expect(app.locator("#summary")).to_contain_text("stage-imbalance")
        expect(app.locator("#heatmap rect.hm-cell")).to_have_count(8)
        expect(app.locator("#causes .cause").first).to_contain_text("stage-imbalance")
        app.locator('#heatmap rect.hm-cell[data-r="3"][data-c="1"]').hover()
        expect(app.locator("#heatmap-tip")).to_contain_text("S_w = ")
        app.locator("[data-role=step]").select_option(index=1)
        expect(app.locator("[data-role=title]")).to_contain_text("step ")
        expect(page.locator("#host-status")).to_contain_text("rendered")
        page.screenshot(path=str(artefacts / "mcp-app.png"), full_page=True)
    finally:
        srv.shutdown()
        srv.server_close()
