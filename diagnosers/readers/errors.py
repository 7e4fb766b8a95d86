"""One mapping from parser, numeric and OS exceptions to a :class:`TraceError` that says what and where.

Readers raise ``TraceError`` for the problems they look for. Everything else a hostile or broken
file can provoke inside a parser (a recursion limit, an integer too large for its column, bytes
that are not UTF-8, a corrupt compressed layer, a cast numpy refuses, a pyarrow parse error, an
``OSError``) is turned into a ``TraceError`` here, once, at the edge of ``load_trace``: every
surface (REST, MCP, CLI) then reports it the same way. Subclasses tell the server which HTTP
status fits: :class:`LimitExceeded` (413, a configured budget was passed) and :class:`DiskFull`
(507, the server's disk, not the input, is the problem).
"""

from __future__ import annotations

import errno
import zlib
from collections.abc import Sequence
from pathlib import Path

from diagnosers.model import TraceError

# A bad value is echoed at most this long: an expanded YAML alias or a giant string column must
# never come back whole in an error message (or a log line).
ECHO_CHARS = 80


def short(value: object, limit: int = ECHO_CHARS) -> str:
    """``repr(value)`` cut to ``limit`` characters (with ``...`` and the full length when cut).

    Containers are not formatted whole first: a list of a million items is summarised by type
    and length, so a huge value costs nothing to describe."""
    if isinstance(value, list | tuple | dict | set) and len(value) > 16:
        return f"<{type(value).__name__} of {len(value)} items>"
    text = repr(value) if not isinstance(value, str | bytes) or len(value) <= 4 * limit else repr(
        value[: 4 * limit]
    )
    if len(text) <= limit:
        return text
    size = len(value) if isinstance(value, str | bytes) else len(text)
    return f"{text[: limit - 3]}... ({size} chars)"


class LimitExceeded(TraceError):
    """The input passes a configured budget (ops, decompressed bytes, nesting, layout size)."""


class DiskFull(TraceError):
    """No space left where the input is read or written; the input itself may be fine."""


def _where(paths: Sequence[str | Path]) -> str | None:
    names = [str(p) for p in paths]
    if not names:
        return None
    if len(names) == 1:
        return names[0]
    return f"{names[0]} (+{len(names) - 1} files)"


def _is_arrow_error(exc: BaseException) -> bool:
    return any(c.__module__.startswith("pyarrow") for c in type(exc).__mro__[:-2])


def _is_yaml_error(exc: BaseException) -> bool:
    return any(c.__module__.startswith("yaml") for c in type(exc).__mro__[:-2])


def describe(exc: BaseException) -> tuple[type[TraceError], str]:
    """(error class, one-line message) for an exception raised while reading an input."""
    if isinstance(exc, RecursionError):
        return TraceError, "the data is nested too deeply to parse (nested lists or objects)"
    if isinstance(exc, MemoryError):
        return LimitExceeded, "reading the input needs more memory than this process may use"
    if isinstance(exc, OverflowError):
        return TraceError, f"a number is too large for its column ({short(str(exc))})"
    if isinstance(exc, UnicodeDecodeError):
        return TraceError, f"not UTF-8 text (a binary file? check --format; bad byte at offset {exc.start})"
    if isinstance(exc, zlib.error):
        return TraceError, f"corrupt compressed data: {short(str(exc))}"
    if isinstance(exc, EOFError):
        return TraceError, "the gzip file is truncated (it ends before its compressed stream does)"
    if isinstance(exc, OSError) and type(exc).__name__ == "BadGzipFile":
        return TraceError, f"not a valid gzip file: {short(str(exc))}"
    if isinstance(exc, OSError):
        if exc.errno == errno.ENOSPC:
            return DiskFull, "no space left on the device"
        if exc.errno == errno.ENAMETOOLONG:
            return TraceError, "a file name is longer than the file system allows"
        if _is_arrow_error(exc):
            return TraceError, f"cannot parse the file: {short(str(exc), 200)}"
        return TraceError, f"cannot read the file: {exc.strerror or short(str(exc))}"
    if _is_arrow_error(exc):
        return TraceError, f"cannot parse the file: {short(str(exc), 200)}"
    if _is_yaml_error(exc):
        return TraceError, f"not valid YAML: {short(getattr(exc, 'problem', None) or str(exc))}"
    if isinstance(exc, ValueError | TypeError | KeyError | IndexError | AttributeError):
        # a value of the wrong type or shape reached a parser or a numpy cast
        return TraceError, f"malformed value in the input ({type(exc).__name__}: {short(str(exc), 160)})"
    raise exc


def as_trace_error(exc: BaseException, paths: Sequence[str | Path] = ()) -> TraceError:
    """``exc`` as a ``TraceError`` naming the file(s) being read; a ``TraceError`` passes as is.

    Raises ``exc`` itself for exceptions that are not about the input (``KeyboardInterrupt``,
    ``SystemExit``, a bug's ``AssertionError``)."""
    if isinstance(exc, TraceError):
        return exc
    cls, message = describe(exc)
    file = getattr(exc, "filename", None) if isinstance(exc, OSError) else None
    return cls(message, file=str(file) if file else _where(paths))
