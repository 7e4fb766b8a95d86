"""The one mapping from exceptions to ``ApiError``, shared by REST, MCP and the upload path.

Input problems come from the readers as ``TraceError`` (their edge turns parser and OS
exceptions into it, ``diagnosers.readers.errors``); here each becomes the status that fits:

| exception | status | code |
|---|---|---|
| ``ApiError`` | its own | its own |
| ``LimitExceeded`` (a budget of the read) | 413 | ``input_too_large`` |
| ``DiskFull``, ``OSError`` ENOSPC / EDQUOT, SQLite "disk is full" | 507 | ``disk_full`` |
| ``TraceError`` | 422 | ``trace_invalid`` |
| ``OSError`` ENAMETOOLONG | 400 | ``name_too_long`` |
| ``RecursionError``, ``OverflowError``, ``FloatingPointError`` in an analysis | 422 | ``trace_invalid`` |

Anything else is a bug: the caller answers 500 (REST, with ``Connection: close``) or a tool
error that says so (MCP), and logs the traceback.
"""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

from diagnosers.model import TraceError
from diagnosers.readers.errors import DiskFull, LimitExceeded, as_trace_error
from server.core.errors import ApiError

DISK_FULL = (
    "the server's disk is full: the request was not completed and nothing stored was changed; "
    "free space in the server's --data-dir and retry"
)


def _cut(message: str, folder: Path | str | None) -> str:
    """The server's own folder cut from a message (a caller knows its files by name only)."""
    if folder is None:
        return message
    return message.replace(f"{folder}/", "").replace(str(folder), ".")


def is_disk_full(exc: BaseException) -> bool:
    if isinstance(exc, DiskFull):
        return True
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return isinstance(exc, sqlite3.OperationalError) and "full" in str(exc).lower()


def api_error(exc: BaseException, folder: Path | str | None = None) -> ApiError | None:
    """The ``ApiError`` for ``exc``, or None when it is not a known input or resource problem."""
    if isinstance(exc, ApiError):
        return exc
    if is_disk_full(exc):
        return ApiError(507, "disk_full", DISK_FULL)
    if isinstance(exc, LimitExceeded):
        return ApiError(413, "input_too_large", f"the trace is refused: {_cut(str(exc), folder)}")
    if isinstance(exc, TraceError):
        return ApiError(422, "trace_invalid", f"the trace cannot be read: {_cut(str(exc), folder)}")
    if isinstance(exc, OSError) and exc.errno == errno.ENAMETOOLONG:
        return ApiError(400, "name_too_long", "a file name is longer than the file system allows")
    if isinstance(exc, RecursionError | OverflowError | FloatingPointError | MemoryError):
        mapped = as_trace_error(exc)
        if isinstance(mapped, LimitExceeded):
            return ApiError(413, "input_too_large", f"the trace cannot be analysed: {mapped}")
        return ApiError(422, "trace_invalid", f"the trace cannot be analysed: {mapped}")
    return None
