"""The MCP contract as real clients see it: string arguments that hold JSON, multi-file and
archive uploads, the meta yaml beside a server-side parquet, the CLI's reading options.

Through the SDK client over a real socket (the ``live`` server of ``conftest``), plus one check
over every registered tool's argument model.
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import shutil
import tarfile
import typing
import zipfile
from pathlib import Path
from typing import Any

import pytest
from lens_testing import Live, native_jsonl
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from diagnosers.ndtimeline_writer import write_local_timeline
from diagnosers.samples import artifact_trace
from diagnosers.synth import ScenarioSpec, generate
from server.core.runtime import LensHolder
from server.core.settings import Settings
from server.mcp.tools import build_mcp

DLRM = Path("/work/shared/data/kineto/param-dlrm-8rank")
DLRM_FILES = sorted(DLRM.glob("worker*.pt.trace.json.gz")) if DLRM.is_dir() else []
needs_dlrm = pytest.mark.skipif(not DLRM_FILES, reason="the public PARAM DLRM Kineto traces are not here")


def text_of(result: Any) -> str:
    return "".join(c.text for c in result.content if c.type == "text")


async def call(live: Live, tool: str, **args: Any) -> Any:
    async with Client(streamable_http_client(live.mcp_url)) as c:
        return await c.call_tool(tool, args)


def test_no_tool_has_a_string_argument_the_sdk_would_json_parse(tmp_path: Path) -> None:
    """The SDK JSON-parses a string argument unless its annotation is exactly ``str``: every
    argument that accepts a string (alone or in a union) must be annotated ``str``."""
    mcp = build_mcp(Settings(data_dir=tmp_path), LensHolder())
    tools = mcp._tool_manager.list_tools()
    assert tools
    bad = []
    for tool in tools:
        for name, field in tool.fn_metadata.arg_model.model_fields.items():
            ann = field.annotation
            if ann is not str and str in typing.get_args(ann):
                bad.append(f"{tool.name}.{name}: {ann}")
    assert not bad, bad


@pytest.fixture(scope="module")
def small_job() -> Any:
    return generate(ScenarioSpec(dp=2, pp=2, microbatches=2, steps=2, scenarios="stage-imbalance", seed=3))


@pytest.mark.anyio
async def test_an_ndtimeline_array_uploads_as_text(live: Live, small_job: Any, tmp_path: Path) -> None:
    path = tmp_path / "trace_step0_1"
    write_local_timeline(small_job.trace, path)
    text = path.read_text()
    assert text.lstrip().startswith("[")  # a JSON array: the SDK would have parsed it into a list
    r = await call(live, "upload_trace", content=text, filename="trace_step0_1", dp=2, pp=2)
    assert not r.is_error, text_of(r)
    s = r.structured_content["summary"]
    assert s["format"] == "ndtimeline" and (s["job"]["dp"], s["job"]["pp"]) == (2, 2)


@needs_dlrm
@pytest.mark.anyio
async def test_a_kineto_json_uploads_as_text_with_partial(live: Live) -> None:
    text = gzip.decompress(DLRM_FILES[0].read_bytes()).decode()
    name = DLRM_FILES[0].name.removesuffix(".gz")
    r = await call(live, "upload_trace", content=text, filename=name)
    assert r.is_error
    # the reader's refusal in this surface's terms: the argument, not a Python-only option
    assert "partial=true" in text_of(r) and "ReadOptions" not in text_of(r), text_of(r)
    r = await call(live, "upload_trace", content=text, filename=name, partial=True)
    assert not r.is_error, text_of(r)
    assert r.structured_content["summary"]["format"] == "kineto"


@pytest.mark.anyio
async def test_similar_incidents_takes_a_json_looking_text(live: Live) -> None:
    r = await call(live, "similar_incidents", text='["gc pause"]', limit=3)
    assert not r.is_error, text_of(r)
    assert r.structured_content["results"]
    r = await call(live, "search_incidents", query='{"gc": 1}', limit=2)
    assert not r.is_error, text_of(r)
    # the string arrives as given: the library's own answer about it, not a validation error
    r = await call(live, "search_incidents", query="gc", category="[]")
    assert r.is_error and "unknown category '[]'" in text_of(r), text_of(r)


@pytest.mark.anyio
async def test_explicit_nulls_still_mean_absent(live: Live) -> None:
    r = await call(live, "list_incidents", category=None, limit=2)
    assert not r.is_error, text_of(r)


def _multi_rank_native() -> list[tuple[str, bytes]]:
    """Two rank files of one DP 2 x PP 1 job in the native format."""
    out = []
    for dp in (0, 1):
        lines = native_jsonl(2, tag="multi").decode().splitlines()
        head = json.loads(lines[0])
        head["job"]["dp_size"] = 2
        ops = [json.loads(x) for x in lines[1:]]
        for op in ops:
            op["dp_rank"] = dp
            op["rank"] = dp
            op["duration"] *= 1 + dp
        out.append((f"rank-{dp}.jsonl", "\n".join(json.dumps(x) for x in [head, *ops]).encode() + b"\n"))
    return out


@pytest.mark.anyio
async def test_a_multi_rank_job_uploads_in_one_call_as_files(
    live: Live, small_job: Any, tmp_path: Path
) -> None:
    from diagnosers.writers import write_meta_yaml, write_parquet

    write_parquet(small_job.trace, tmp_path / "trace.parquet")
    write_meta_yaml(small_job.trace.meta, tmp_path / "meta.yaml")
    files = [
        {
            "name": "trace.parquet",
            "content": base64.b64encode((tmp_path / "trace.parquet").read_bytes()).decode(),
            "encoding": "base64",
        },
        {"name": "meta.yaml", "content": (tmp_path / "meta.yaml").read_text()},
    ]
    r = await call(live, "upload_trace", files=files)
    assert not r.is_error, text_of(r)
    assert (r.structured_content["summary"]["job"]["dp"], r.structured_content["summary"]["job"]["pp"]) == (
        2,
        2,
    )


def _tar_gz(members: list[tuple[str, bytes]], extra: tarfile.TarInfo | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        if extra is not None:
            tar.addfile(extra)
    return buf.getvalue()


def _zip(members: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members:
            zf.writestr(name, data)
    return buf.getvalue()


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["tar.gz", "zip"])
async def test_a_multi_rank_job_uploads_as_an_archive(live: Live, kind: str) -> None:
    members = [(f"job/{n}", d) for n, d in _multi_rank_native()]
    blob = _tar_gz(members) if kind == "tar.gz" else _zip(members)
    r = await call(
        live,
        "upload_trace",
        content=base64.b64encode(blob).decode(),
        encoding="base64",
        filename=f"job.{kind}",
    )
    assert not r.is_error, text_of(r)
    assert r.structured_content["summary"]["job"]["dp"] == 2


@pytest.mark.anyio
async def test_archives_refuse_path_escapes_and_links(live: Live) -> None:
    good = _multi_rank_native()
    escape = _tar_gz([("../evil.jsonl", good[0][1]), *good])
    r = await call(
        live,
        "upload_trace",
        content=base64.b64encode(escape).decode(),
        encoding="base64",
        filename="x.tar.gz",
    )
    assert r.is_error and "escapes the archive" in text_of(r), text_of(r)
    link = tarfile.TarInfo("link.jsonl")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    r = await call(
        live,
        "upload_trace",
        content=base64.b64encode(_tar_gz(good, link)).decode(),
        encoding="base64",
        filename="y.tgz",
    )
    assert r.is_error and "is a symlink" in text_of(r), text_of(r)
    dev = tarfile.TarInfo("dev.jsonl")
    dev.type = tarfile.CHRTYPE
    r = await call(
        live,
        "upload_trace",
        content=base64.b64encode(_tar_gz(good, dev)).decode(),
        encoding="base64",
        filename="z.tar.gz",
    )
    assert r.is_error and "device" in text_of(r), text_of(r)


@pytest.mark.anyio
async def test_an_archive_bomb_stops_at_the_cap(secured_client_settings: Path) -> None:
    settings = Settings(
        data_dir=secured_client_settings, max_upload_bytes=1024 * 1024, max_decompressed_bytes=2 * 1024 * 1024
    )
    bomb = _zip([("a.jsonl", b"\n" * (3 * 1024 * 1024))])
    assert len(bomb) < 64 * 1024
    async with Client(build_mcp(settings, LensHolder())) as c:
        r = await c.call_tool(
            "upload_trace",
            {"content": base64.b64encode(bomb).decode(), "encoding": "base64", "filename": "b.zip"},
        )
    assert r.is_error and "decompressed upload exceeds" in text_of(r), text_of(r)
    assert not list((secured_client_settings / "tmp").glob("*"))


@pytest.fixture
def secured_client_settings(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.mark.anyio
async def test_a_server_side_parquet_picks_up_its_meta(live: Live) -> None:
    allow = live.settings.allow_dirs[0]
    src = artifact_trace("ST")
    shutil.copy(src, allow / "trace-ST.parquet")
    shutil.copy(src.with_name("meta-ST.yaml"), allow / "meta-ST.yaml")
    r = await call(live, "upload_trace", path="trace-ST.parquet")
    assert not r.is_error, text_of(r)
    s = r.structured_content["summary"]
    assert (s["job"]["dp"], s["job"]["pp"]) == (2, 4)
    assert "meta-ST.yaml" in s["files"], s


def test_rest_takes_archives_and_the_reading_options(live: Live) -> None:
    import httpx

    blob = _tar_gz([(f"job/{n}", d) for n, d in _multi_rank_native()])
    r = httpx.post(
        f"{live.url}/api/traces", files=[("files", ("job.tar.gz", blob))], data={"gpus_per_host": "4"}
    )
    assert r.status_code in (200, 201), r.text
    assert r.json()["summary"]["job"]["dp"] == 2
    r = httpx.post(f"{live.url}/api/traces?filename=j.zip&partial=maybe", content=_zip(_multi_rank_native()))
    assert r.status_code == 400 and "partial='maybe' must be true or false" in r.text
    r = httpx.post(
        f"{live.url}/api/traces?filename=j.zip&layers_per_stage=0", content=_zip(_multi_rank_native())
    )
    assert r.status_code == 400 and "layers_per_stage" in r.text


@needs_dlrm
def test_rest_reader_errors_name_the_query_parameters(live: Live) -> None:
    import httpx

    r = httpx.post(f"{live.url}/api/traces?filename={DLRM_FILES[1].name}", content=DLRM_FILES[1].read_bytes())
    assert r.status_code == 422 and "partial=true" in r.text and "ReadOptions" not in r.text, r.text
    r = httpx.post(
        f"{live.url}/api/traces?filename={DLRM_FILES[1].name}&partial=true",
        content=DLRM_FILES[1].read_bytes(),
    )
    assert r.status_code in (200, 201), r.text


@pytest.mark.anyio
async def test_tools_list_is_slim_and_keeps_what_validates(live: Live) -> None:
    async with Client(streamable_http_client(live.mcp_url)) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        listing = json.dumps(
            [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools.values()]
        )
        # 89 kB for 20 tools (4.5 kB each) before annotation titles were dropped, 68 kB after; the
        # monitoring, fleet and timeline tools came later, so the bound is per tool
        assert len(listing) < 3_600 * len(tools), (len(listing), len(tools))
        case = tools["get_incident"].output_schema
        assert "title" in case["properties"], "a property named title is data, not an annotation"
        assert '"title": "Slowdown"' not in listing
        # diagnose's embedded report points at run_whatif's schema instead of repeating it
        assert "run_whatif" in tools["diagnose"].output_schema["properties"]["report"]["description"]
        assert "WhatIfReport" in json.dumps(tools["run_whatif"].output_schema)
        r = await c.call_tool(
            "diagnose",
            {"trace_id": (await c.call_tool("list_traces", {})).structured_content["items"][-1]["trace_id"]},
        )
        assert not r.is_error, text_of(r)  # the client validated the structured content against it
