"""Helpers shared by the server tests (importable: pytest puts this folder on sys.path)."""

from __future__ import annotations

import json

from tests._support.live import Live, LiveServer

__all__ = ["TOKEN", "Live", "LiveServer", "native_jsonl"]

TOKEN = "test-token-0123456789abcdef"


def native_jsonl(n_steps: int = 2, tag: str = "") -> bytes:
    """A tiny trace in the project's native JSON Lines format (1 DP x 1 PP worker)."""
    header = {
        "format": "straggler-lens/native",
        "version": 1,
        "job": {"dp_size": 1, "pp_size": 1, "trial_name": tag or "t"},
    }
    lines = [json.dumps(header)]
    for step in range(n_steps):
        for optype, start, dur in (("forward-compute", 0.0, 0.010), ("backward-compute", 0.011, 0.020)):
            op = {
                "dp_rank": 0,
                "stage": 0,
                "rank": 0,
                "step": step,
                "optype": optype,
                "start_ts": start,
                "duration": dur,
                "seq_id": 0,
                "mc": 0,
                "gmc": 0,
                "mb_id": 0,
            }
            lines.append(json.dumps(op))
    return ("\n".join(lines) + "\n").encode()


# A raw MCP initialize request and the headers Streamable HTTP needs (for tests below the SDK client)
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
