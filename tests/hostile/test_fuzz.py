"""A seeded, bounded fuzz suite (hypothesis, profile ``ci`` in conftest.py): mutated traces and
meta files through the readers and the upload routes, REST and MCP (the real SDK client over a
real socket). Readers raise nothing but ``TraceError``; routes answer no 5xx and no bare tool
error; afterwards the server is alive and what it stored before is unchanged."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import anyio.from_thread
import httpx
import pytest
from hostile_inputs import csv, kineto, native, one_worker, op, two_stage
from hypothesis import given
from hypothesis import strategies as st
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from diagnosers.model import TraceError
from diagnosers.readers import ReadOptions, load_trace
from tests._support.live import Live

SEEDS: list[tuple[str, bytes]] = [
    ("t.jsonl", one_worker()),
    ("p.jsonl", two_stage()),
    ("t.csv", csv(["0,0,0,0,forward-compute,0.0,0.1", "0,0,0,1,forward-compute,1.0,0.1"])),
    (
        "rank0.json",
        kineto({"rank": 0, "world_size": 1, "pg_config": [{"pg_desc": "default_pg", "ranks": [0]}]}),
    ),
]
META = b"dp_size: 1\npp_size: 1\ntrial_name: fuzz\n"

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@st.composite
def mutated(draw: Any) -> tuple[str, bytes]:
    """A seed file with a few byte edits, or a native trace with one field replaced by any JSON
    value, or a job line with odd values."""
    kind = draw(st.sampled_from(["bytes", "field", "job"]))
    if kind == "field":
        key = draw(
            st.sampled_from(["dp_rank", "stage", "rank", "step", "optype", "start_ts", "duration", "seq_id"])
        )
        return "f.jsonl", one_worker(**{key: draw(json_values)})
    if kind == "job":
        job = draw(
            st.dictionaries(
                st.sampled_from(["dp_size", "pp_size", "tp_size", "vpp_size", "trial_name"]),
                json_values,
                max_size=3,
            )
        )
        return "j.jsonl", native(job, [op(0, 0, "forward-compute", 0.0, 0.1)])
    name, data = draw(st.sampled_from(SEEDS))
    edits = draw(st.lists(st.tuples(st.integers(0, len(data) - 1), st.binary(max_size=6)), max_size=4))
    buf = bytearray(data)
    for pos, repl in edits:
        buf[pos : pos + len(repl)] = repl
    return name, bytes(buf)


meta_files = st.one_of(
    st.just(META),
    st.binary(max_size=64),
    st.dictionaries(
        st.sampled_from(["dp_size", "pp_size", "tp_size", "layers_per_stage", "bogus"]),
        json_values,
        max_size=3,
    ).map(lambda d: json.dumps(d).encode()),  # JSON is YAML
)


@given(file=mutated(), meta=st.none() | meta_files)
def test_readers_raise_only_trace_errors(file: tuple[str, bytes], meta: bytes | None, tmp_path: Path) -> None:
    folder = tmp_path / hashlib.sha256(file[1] + (meta or b"")).hexdigest()[:12]
    folder.mkdir(exist_ok=True)
    paths = [folder / file[0]]
    paths[0].write_bytes(file[1])
    if meta is not None:
        (folder / "meta.yaml").write_bytes(meta)
        paths.append(folder / "meta.yaml")
    try:
        trace = load_trace(paths, ReadOptions())
    except TraceError as exc:
        assert len(str(exc)) < 2000
    else:
        assert len(trace.ops.optype) > 0


def snapshot(live: Live) -> dict[str, Any]:
    """What the server stores: every trace's record and its files' hashes."""
    listing = httpx.get(f"{live.url}/api/traces?limit=100").json()
    out = {}
    for item in listing["items"]:
        folder = live.settings.data_dir / "traces" / item["trace_id"]
        files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}
        out[item["trace_id"]] = (item["summary"], files)
    return out


@pytest.fixture(scope="module")
def before(live: Live) -> dict[str, Any]:
    return snapshot(live)


queries = st.dictionaries(
    st.sampled_from(["dp", "pp", "tp", "cp", "format", "filename"]),
    st.text(max_size=12) | st.integers(-5, 2**70).map(str),
    max_size=2,
)


@given(file=mutated(), meta=st.none() | meta_files, query=queries, raw=st.booleans())
def test_rest_uploads_never_answer_5xx(
    live: Live,
    before: dict[str, Any],
    file: tuple[str, bytes],
    meta: bytes | None,
    query: dict[str, str],
    raw: bool,
) -> None:
    if raw:
        r = httpx.post(
            f"{live.url}/api/traces", params={"filename": file[0], **query}, content=file[1], timeout=60
        )
    else:
        files = [("files", file)] + ([("files", ("meta.yaml", meta))] if meta is not None else [])
        r = httpx.post(f"{live.url}/api/traces", params=query, files=files, timeout=60)
    assert r.status_code < 500, r.text
    if r.status_code >= 400:
        assert r.json()["error"]["message"]


@pytest.fixture(scope="module")
def mcp_client(live: Live) -> Any:
    # one session for every example: entered and left in one task of a portal's event loop
    with (
        anyio.from_thread.start_blocking_portal() as portal,
        portal.wrap_async_context_manager(Client(streamable_http_client(live.mcp_url))) as client,
    ):
        yield portal, client


@given(
    file=mutated(),
    sizes=st.dictionaries(st.sampled_from(["dp", "pp"]), st.integers(-3, 2**40), max_size=2),
    fmt=st.none() | st.sampled_from(["native", "artifact", "kineto", "ndtimeline", "csv", "bogus"]),
)
def test_mcp_uploads_never_give_a_bare_tool_error(
    mcp_client: Any, file: tuple[str, bytes], sizes: dict[str, int], fmt: str | None
) -> None:
    portal, client = mcp_client
    args: dict[str, Any] = {
        "content": base64.b64encode(file[1]).decode(),
        "encoding": "base64",
        "filename": file[0],
        **sizes,
    }
    if fmt:
        args["format"] = fmt
    r = portal.call(client.call_tool, "upload_trace", args)
    if r.is_error:
        text = " ".join(getattr(b, "text", "") for b in r.content)
        assert not text.rstrip().endswith("Error executing tool upload_trace"), text
        assert "internal error" not in text, text


def test_the_server_is_alive_and_its_store_unchanged(live: Live, before: dict[str, Any]) -> None:
    # runs after the fuzz tests of this module (pytest keeps file order)
    assert httpx.get(f"{live.url}/healthz").json()["status"] == "ok"
    after = snapshot(live)
    for tid, value in before.items():
        assert after[tid] == value
    st_id = next(iter(before))
    assert httpx.get(f"{live.url}/api/traces/{st_id}/whatif").status_code == 200
