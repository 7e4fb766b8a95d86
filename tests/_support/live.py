"""The real app under uvicorn in a background thread on 127.0.0.1:<free port>.

Used by the server, hostile, web and service tests: one server per fixture scope, real sockets on
loopback, stopped on exit.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import uvicorn

from server.app import create_app
from server.core.settings import Settings


@dataclass
class Live:
    """A started server: its base URL, the settings it runs with and the uvicorn server."""

    url: str
    settings: Settings
    server: uvicorn.Server

    @property
    def mcp_url(self) -> str:
        return f"{self.url}/mcp"


class LiveServer:
    """uvicorn in a background thread on 127.0.0.1:<free port>; stops on exit.

    ``start_timeout`` bounds the wait for the server to listen (start-up preloads the sample and
    the incident library, slow on a loaded machine); ``stop_timeout`` bounds the join on exit.
    """

    def __init__(self, settings: Settings, start_timeout: float = 30.0, stop_timeout: float = 20.0):
        self.settings = settings
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        config = uvicorn.Config(create_app(settings), host="127.0.0.1", port=0, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Live:
        self.thread.start()
        deadline = time.monotonic() + self.start_timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("server did not start")
            time.sleep(0.02)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return Live(f"http://127.0.0.1:{port}", self.settings, self.server)

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=self.stop_timeout)
