"""Fidelity through the MCP surface: the server wraps the diagnosis model, so it says it first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import Client

from server.core.runtime import LensHolder
from server.core.settings import Settings
from server.mcp.tools import build_mcp

DLRM = Path("/work/shared/data/kineto/param-dlrm-8rank")


@pytest.mark.anyio
@pytest.mark.skipif(not DLRM.exists(), reason="public DLRM traces not present")
async def test_dlrm_is_unreliable_in_every_mcp_answer(tmp_path: Path) -> None:
    folder = DLRM.parent.resolve()
    settings = Settings(data_dir=tmp_path / "data", allow_dirs=(folder,))
    async with Client(build_mcp(settings, LensHolder())) as c:
        up = await c.call_tool("upload_trace", {"path": DLRM.name})
        assert not up.is_error, up.content
        tid = up.structured_content["trace_id"]
        diag = await c.call_tool("diagnose", {"trace_id": tid})
        body = diag.structured_content
        assert next(iter(body)) == "fidelity" and body["fidelity"]["verdict"] == "unreliable"
        assert body["summary"].startswith("UNRELIABLE")
        text = " ".join(getattr(b, "text", "") for b in diag.content)
        assert next(iter(json.loads(text))) == "fidelity"
        assert not any(r["destructive"] for r in body["remedies"])
        assert not any("Drain" in r["action"] for r in body["remedies"])
        for tool in ("classify_patterns", "suggest_remedies"):
            r = await c.call_tool(tool, {"trace_id": tid})
            assert not r.is_error
            assert next(iter(r.structured_content)) == "fidelity", tool
            assert r.structured_content["fidelity"]["verdict"] == "unreliable", tool
        hm = await c.call_tool("get_heatmap", {"trace_id": tid})
        assert hm.structured_content["heatmap"]["title"].startswith("UNRELIABLE")
