"""The MCP Inspector CLI (an independent client on the TypeScript SDK) against a real server.

Pinned to @modelcontextprotocol/inspector@2.12.0. It negotiates the legacy handshake, so it also
covers the 2025-11-25 path. ``--strict`` checks the tool schemas for portability (exit 6 on errors).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from lens_testing import Live

INSPECTOR = "@modelcontextprotocol/inspector@2.12.0"
pytestmark = [
    pytest.mark.network,
    pytest.mark.skipif(
        shutil.which("npx") is None, reason="npx (Node.js) is not installed; the Inspector CLI needs it"
    ),
]


def inspector(live: Live, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MCP_CATALOG_PATH": str(tmp_path / "catalog.json"), "NO_UPDATE_NOTIFIER": "1"}
    return subprocess.run(
        ["npx", "-y", INSPECTOR, "--cli", live.mcp_url, *args],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=tmp_path,
    )


def payload(proc: subprocess.CompletedProcess[str]) -> dict:
    out = proc.stdout
    return json.loads(out[out.index("{") :])


@pytest.mark.parametrize("strict", [False, True])
def test_inspector_lists_the_tools(live: Live, tmp_path: Path, strict: bool) -> None:
    proc = inspector(live, tmp_path, "--method", "tools/list", *(["--strict"] if strict else []))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = {t["name"] for t in payload(proc)["tools"]}
    assert {"upload_trace", "list_traces", "describe_trace"} <= names


def test_inspector_calls_a_tool(live: Live, tmp_path: Path) -> None:
    # (--strict applies to tools/list only: the Inspector refuses it with tools/call)
    args = ["--method", "tools/call", "--tool-name", "list_traces", "--tool-arg", "limit=5"]
    proc = inspector(live, tmp_path, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = payload(proc)
    assert result["structuredContent"]["items"][0]["summary"]["job"]["trial_name"] == "ST"


def test_inspector_sees_a_tool_error_as_is_error(live: Live, tmp_path: Path) -> None:
    proc = inspector(
        live,
        tmp_path,
        "--method",
        "tools/call",
        "--tool-name",
        "describe_trace",
        "--tool-arg",
        "trace_id=nope",
    )
    assert proc.returncode == 5, proc.stdout + proc.stderr  # 5: the tool returned isError
    assert "no trace 'nope'" in proc.stdout


def test_inspector_is_refused_with_a_foreign_origin(live: Live, tmp_path: Path) -> None:
    proc = inspector(live, tmp_path, "--method", "tools/list", "--header", "Origin: http://evil.example")
    assert proc.returncode != 0
    assert "403" in proc.stdout + proc.stderr


def test_inspector_runs_a_diagnosis(live: Live, tmp_path: Path) -> None:
    import httpx

    tid = httpx.get(f"{live.url}/api/traces").json()["items"][-1]["trace_id"]
    args = ["--method", "tools/call", "--tool-name", "diagnose", "--tool-arg", f"trace_id={tid}"]
    proc = inspector(live, tmp_path, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert payload(proc)["structuredContent"]["causes"][0]["id"] == "stage-imbalance"
