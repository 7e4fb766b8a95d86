"""Helpers shared by the server tests (importable: pytest puts this folder on sys.path)."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass

import uvicorn

from server.app import create_app
from server.core.settings import Settings

TOKEN = "test-token-0123456789abcdef"


@dataclass
class Live:
    url: str
    settings: Settings
    server: uvicorn.Server

    @property
    def mcp_url(self) -> str:
        return f"{self.url}/mcp"


class LiveServer:
    """uvicorn in a background thread on 127.0.0.1:<free port>; stops on exit."""

    def __init__(self, settings: Settings):
        self.settings = settings
        config = uvicorn.Config(create_app(settings), host="127.0.0.1", port=0, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Live:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("server did not start")
            time.sleep(0.02)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return Live(f"http://127.0.0.1:{port}", self.settings, self.server)

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


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
