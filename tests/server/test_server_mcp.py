"""The MCP surface through the SDK's in-process client and its Streamable HTTP client."""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from lens_testing import Live, native_jsonl
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from server.core.runtime import LensHolder
from server.core.settings import Settings
from server.mcp.tools import build_mcp
from server.mcp.views import rounded

TRACE_TOOLS = {"upload_trace", "list_traces", "describe_trace"}


@pytest.fixture
def allowed(tmp_path: Path) -> Path:
    folder = (tmp_path / "allowed").resolve()
    folder.mkdir()
    return folder


@pytest.fixture
async def client(tmp_path: Path, allowed: Path) -> AsyncIterator[Client]:
    settings = Settings(data_dir=tmp_path / "data", allow_dirs=(allowed,), max_inline_bytes=64 * 1024)
    async with Client(build_mcp(settings, LensHolder())) as c:
        yield c


def text_of(result: object) -> str:
    return " ".join(getattr(b, "text", "") for b in result.content)  # type: ignore[attr-defined]


@pytest.mark.anyio
async def test_tools_have_schemas_annotations_and_descriptions(client: Client) -> None:
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) >= TRACE_TOOLS
    for name, tool in tools.items():
        assert tool.description, name
        # dedented: no source indentation reaches the client
        assert not any(line.startswith(" ") for line in tool.description.splitlines()), name
        assert tool.output_schema is not None, f"{name} has no output schema"
        assert tool.annotations is not None, name
    assert tools["describe_trace"].annotations.read_only_hint is True
    assert tools["list_traces"].annotations.read_only_hint is True
    assert tools["upload_trace"].annotations.read_only_hint is False
    props = tools["upload_trace"].input_schema["properties"]
    assert {"content", "encoding", "filename", "path", "format", "dp", "pp", "tp", "cp"} <= set(props)
    assert tools["list_traces"].input_schema["properties"]["limit"]["default"] == 20


@pytest.mark.anyio
async def test_inline_upload_then_describe_and_list(client: Client) -> None:
    r = await client.call_tool(
        "upload_trace", {"content": native_jsonl(3, "inline").decode(), "filename": "a.jsonl"}
    )
    assert not r.is_error, text_of(r)
    up = r.structured_content
    assert up["created"] and up["summary"]["n_steps"] == 3
    again = await client.call_tool(
        "upload_trace", {"content": native_jsonl(3, "inline").decode(), "filename": "a.jsonl"}
    )
    assert again.structured_content["trace_id"] == up["trace_id"] and not again.structured_content["created"]
    d = await client.call_tool("describe_trace", {"trace_id": up["trace_id"]})
    assert d.structured_content["summary"]["format"] == "native"
    listing = await client.call_tool("list_traces", {"limit": 5})
    assert listing.structured_content["total"] == 1
    assert listing.structured_content["items"][0]["trace_id"] == up["trace_id"]


@pytest.mark.anyio
async def test_base64_gzip_inline_upload(client: Client) -> None:
    content = base64.b64encode(gzip.compress(native_jsonl(2, "b64"))).decode()
    r = await client.call_tool(
        "upload_trace", {"content": content, "encoding": "base64", "filename": "t.jsonl.gz"}
    )
    assert not r.is_error, text_of(r)
    assert r.structured_content["summary"]["files"] == ["t.jsonl"]


@pytest.mark.anyio
async def test_upload_errors_tell_the_assistant_what_to_do(
    client: Client, allowed: Path, tmp_path: Path
) -> None:
    big = "x" * (100 * 1024)  # over the 64 KiB inline cap of this fixture
    r = await client.call_tool("upload_trace", {"content": big})
    assert r.is_error and "POST /api/traces" in text_of(r)
    r = await client.call_tool("upload_trace", {})
    assert r.is_error and "exactly one" in text_of(r)
    r = await client.call_tool("upload_trace", {"content": "!!!", "encoding": "base64"})
    assert r.is_error and "base64" in text_of(r)
    r = await client.call_tool("upload_trace", {"path": str(tmp_path / "elsewhere.jsonl")})
    assert r.is_error and "allowed" in text_of(r)
    r = await client.call_tool("upload_trace", {"path": "../data/lens.sqlite3"})
    assert r.is_error and "'..'" in text_of(r)
    r = await client.call_tool("upload_trace", {"content": "not,a\ntrace,1\n", "filename": "x.csv"})
    assert r.is_error and "x.csv" in text_of(r)
    r = await client.call_tool("describe_trace", {"trace_id": "feedface"})
    assert r.is_error and "list_traces" in text_of(r)
    r = await client.call_tool("list_traces", {"limit": 0})
    assert r.is_error


@pytest.mark.anyio
async def test_server_side_path_upload_reads_a_folder(
    client: Client, allowed: Path, st_files: list[Path]
) -> None:
    job = allowed / "st"
    job.mkdir()
    for p in st_files:
        (job / p.name).write_bytes(p.read_bytes())
    r = await client.call_tool("upload_trace", {"path": "st"})
    assert not r.is_error, text_of(r)
    assert r.structured_content["summary"]["job"]["pp"] == 4


@pytest.mark.anyio
async def test_trace_resource_and_prompt(client: Client) -> None:
    r = await client.call_tool(
        "upload_trace", {"content": native_jsonl(2, "res").decode(), "filename": "r.jsonl"}
    )
    tid = r.structured_content["trace_id"]
    templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
    assert "trace://{trace_id}" in templates
    res = await client.read_resource(f"trace://{tid}")
    assert json.loads(res.contents[0].text)["trace_id"] == tid
    prompts = {p.name for p in (await client.list_prompts()).prompts}
    assert "diagnose_slow_job" in prompts
    got = await client.get_prompt("diagnose_slow_job", {"trace_id": tid})
    assert tid in got.messages[0].content.text and "diagnose" in got.messages[0].content.text


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_streamable_http_client_over_a_real_socket(live: Live, mode: str) -> None:
    async with Client(streamable_http_client(live.mcp_url), mode=mode) as c:
        tools = {t.name for t in (await c.list_tools()).tools}
        assert tools >= TRACE_TOOLS
        listing = await c.call_tool("list_traces", {})
        assert not listing.is_error
        sample = listing.structured_content["items"][-1]
        d = await c.call_tool("describe_trace", {"trace_id": sample["trace_id"]})
        assert d.structured_content["summary"]["job"]["trial_name"] == "ST"


@pytest.mark.anyio
async def test_an_inline_upload_near_the_cap_fits_the_http_request_limit(live: Live) -> None:
    data = native_jsonl(3000, "near-cap")
    assert 0.8 * 1024 * 1024 < len(data) < 1024 * 1024
    content = base64.b64encode(data).decode()  # ~1.3 MiB on the wire
    async with Client(streamable_http_client(live.mcp_url)) as c:
        r = await c.call_tool(
            "upload_trace", {"content": content, "encoding": "base64", "filename": "big.jsonl"}
        )
        assert not r.is_error, text_of(r)
        assert r.structured_content["summary"]["n_steps"] == 3000
        over = base64.b64encode(data + data[: 300 * 1024]).decode()
        r = await c.call_tool("upload_trace", {"content": over, "encoding": "base64"})
        assert r.is_error and "POST /api/traces" in text_of(r)


@pytest.mark.anyio
async def test_results_stay_bounded_on_the_64_worker_sample(tmp_path: Path) -> None:
    """SE (dp 32 x pp 2, sequence-length imbalance): every answer well under ~10k tokens of text."""
    from diagnosers.samples import artifact_trace

    folder = artifact_trace("SE").parent.resolve()
    settings = Settings(data_dir=tmp_path / "data", allow_dirs=(folder,))
    async with Client(build_mcp(settings, LensHolder())) as c:
        up = await c.call_tool("upload_trace", {"path": "trace-SE.parquet"})
        assert not up.is_error, text_of(up)
        tid = up.structured_content["trace_id"]
        for tool, args in (
            ("diagnose", {}),
            ("run_whatif", {}),
            ("run_whatif", {"dp_ranks": [0, 1]}),
            ("classify_patterns", {}),
            ("suggest_remedies", {}),
            ("get_heatmap", {}),
            ("describe_trace", {}),
        ):
            r = await c.call_tool(tool, {"trace_id": tid, **args})
            assert not r.is_error, (tool, text_of(r))
            assert len(text_of(r)) < 30_000, (tool, len(text_of(r)))
            assert len(json.dumps(r.structured_content)) < 30_000, tool
        diag = await c.call_tool("diagnose", {"trace_id": tid})
        body = diag.structured_content
        assert body["truncated"] and body["omitted"]
        assert json.loads(text_of(diag)) == rounded(body), "the text block: the same object, compact, rounded"


@pytest.mark.anyio
async def test_the_tool_table_in_docs_matches_the_server(client: Client) -> None:
    import re

    doc = (Path(__file__).resolve().parents[2] / "docs" / "SERVER.md").read_text(encoding="utf-8")
    section = doc.split("## MCP surface", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", section, flags=re.M))
    served = {t.name for t in (await client.list_tools()).tools}
    assert documented == served
