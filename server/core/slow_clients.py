"""Dropping slow clients: a header timeout at the HTTP protocol (uvicorn has none of its own).

uvicorn's h11 protocol waits forever for a request's headers, so a client that sends them a byte
at a time (slowloris) holds a connection without limit. ``protocol_with_header_timeout`` gives it
a deadline: the headers of every request on a connection (the first, and each one after a
keep-alive response) must be complete within ``timeout`` seconds, else the server answers 408
and closes. The body's own limits (an idle timeout and a total deadline) are in ``uploads.py``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

_BODY_408 = (
    b'{"error": {"status": 408, "code": "header_timeout", '
    b'"message": "request headers arrived too slowly"}}'
)
TIMEOUT_408 = (
    b"HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\nConnection: close\r\n"
    + f"Content-Length: {len(_BODY_408)}\r\n\r\n".encode()
    + _BODY_408
)


class HeaderTimeoutProtocol(H11Protocol):
    """``H11Protocol`` whose request headers must arrive within ``header_timeout`` seconds."""

    header_timeout = 30.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def _arm(self) -> None:
        self._waiting_for = self.cycle
        self._header_timer: asyncio.TimerHandle | None = self.loop.call_later(
            self.header_timeout, self._headers_late
        )

    def _disarm(self) -> None:
        timer = getattr(self, "_header_timer", None)
        if timer is not None:
            timer.cancel()
            self._header_timer = None

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.cycle is not self._waiting_for:  # a new request's headers are complete
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._disarm()
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _headers_late(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing() and self.cycle is self._waiting_for:
            self.transport.write(TIMEOUT_408)
            self.transport.close()


def protocol_with_header_timeout(timeout: float) -> Any:
    """The protocol class to hand uvicorn as ``http=``."""
    return type("HeaderTimeoutProtocol", (HeaderTimeoutProtocol,), {"header_timeout": timeout})
