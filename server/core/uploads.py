"""Reading an upload request into a staging folder: multipart (parts named ``files``) or raw body.

Both stream: chunks go straight to disk through ``ingest.FileSink`` under the upload budget, so a
request larger than ``--max-upload-mb`` is cut off as soon as it passes the limit.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import anyio
import anyio.to_thread
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import Request

if TYPE_CHECKING:
    from python_multipart.multipart import MultipartCallbacks

from server.core.errors import ApiError
from server.core.staging import (
    FileSink,
    StagedFile,
    UploadBudget,
    batched,
    safe_filename,
    write_stream,
)

# Non-file multipart fields accepted next to the files (same meaning as the query parameters).
FIELD_NAMES = (
    "format",
    "dp",
    "pp",
    "tp",
    "cp",
    "vpp",
    "gpus_per_host",
    "layers_per_stage",
    "partial",
    "filename",
)
MAX_FIELD_BYTES = 1024
MAX_PARTS = 4096
MAX_BOUNDARY = 200
# An upload that sends nothing for this long is dropped (a stalled or half-dead client must not
# hold a staging folder and a worker forever).
IDLE_TIMEOUT_S = 60.0


async def body_chunks(
    request: Request, idle_timeout: float = IDLE_TIMEOUT_S, deadline: float | None = None
) -> AsyncIterator[bytes]:
    """The request body, chunk by chunk; 408 when the client stalls for ``idle_timeout`` seconds
    or the whole body takes longer than ``deadline`` seconds (a trickling client)."""
    stream = request.stream().__aiter__()
    end = anyio.current_time() + deadline if deadline is not None else None
    while True:
        wait = idle_timeout if end is None else min(idle_timeout, end - anyio.current_time())
        try:
            with anyio.fail_after(max(wait, 0.0)):
                chunk = await stream.__anext__()
        except StopAsyncIteration:
            return
        except TimeoutError:
            if end is not None and anyio.current_time() >= end:
                message = f"the upload took longer than {deadline:.0f} s; it was dropped"
            else:
                message = f"no upload data for {idle_timeout:.0f} s; the upload was dropped"
            raise ApiError(408, "upload_timeout", message, {"Connection": "close"}) from None
        yield chunk


class _MultipartState:
    """Turns parser callbacks into file sinks and small text fields."""

    def __init__(self, folder: Path, budget: UploadBudget):
        self.folder, self.budget = folder, budget
        self.files: list[StagedFile] = []
        self.fields: dict[str, str] = {}
        self._header_field = b""
        self._header_value = b""
        self._headers: dict[bytes, bytes] = {}
        self._sink: FileSink | None = None
        self._field: str | None = None
        self._field_value = b""
        self.parts = 0
        self.events: list[tuple[str, bytes]] = []

    # parser callbacks only record events; ``process`` acts on them outside the parser, so an
    # exception (413, bad gzip) never leaves the parser half-way through a callback.
    def callbacks(self) -> dict[str, Any]:
        ev = self.events
        return {
            "on_part_begin": lambda: ev.append(("begin", b"")),
            "on_part_data": lambda d, s, e: ev.append(("data", bytes(d[s:e]))),
            "on_part_end": lambda: ev.append(("end", b"")),
            "on_header_field": lambda d, s, e: ev.append(("hfield", bytes(d[s:e]))),
            "on_header_value": lambda d, s, e: ev.append(("hvalue", bytes(d[s:e]))),
            "on_header_end": lambda: ev.append(("hend", b"")),
            "on_headers_finished": lambda: ev.append(("hdone", b"")),
        }

    def process(self) -> None:
        for kind, data in self.events:
            if kind == "begin":
                self.parts += 1
                if self.parts > MAX_PARTS:
                    raise ApiError(400, "too_many_parts", f"more than {MAX_PARTS} multipart parts")
                self._headers = {}
            elif kind == "hfield":
                self._header_field += data
            elif kind == "hvalue":
                self._header_value += data
            elif kind == "hend":
                self._headers[self._header_field.lower()] = self._header_value
                self._header_field = self._header_value = b""
            elif kind == "hdone":
                self._start_part()
            elif kind == "data":
                if self._sink is not None:
                    self._sink.write(data)
                else:
                    self._field_value += data
                    if len(self._field_value) > MAX_FIELD_BYTES:
                        raise ApiError(400, "field_too_large", f"form field {self._field!r} is too long")
            elif kind == "end":
                if self._sink is not None:
                    self.files.append(self._sink.close())
                    self._sink = None
                elif self._field is not None:
                    self.fields[self._field] = self._field_value.decode("utf-8", "replace").strip()
                    self._field, self._field_value = None, b""
        self.events.clear()

    def _start_part(self) -> None:
        _, opts = parse_options_header(self._headers.get(b"content-disposition", b""))
        name = opts.get(b"name", b"").decode("utf-8", "replace")
        filename = opts.get(b"filename")
        if filename is not None:
            if name != "files":
                raise ApiError(
                    400, "bad_part_name", f"file part named {name!r}; name every file part 'files'"
                )
            fname = safe_filename(filename.decode("utf-8", "replace"), f"file{self.parts}")
            self._sink = FileSink(self.folder, fname, self.budget)
        elif name in FIELD_NAMES:
            self._field, self._field_value = name, b""
        else:
            raise ApiError(
                400,
                "bad_part_name",
                f"unexpected form field {name!r}; send files as parts named 'files' "
                f"and options as {', '.join(FIELD_NAMES[:-1])}",
            )

    def abort(self) -> None:
        if self._sink is not None:
            self._sink.abort()


async def receive_upload(
    request: Request, folder: Path, budget: UploadBudget, deadline: float | None = None
) -> tuple[list[StagedFile], dict[str, str]]:
    """Stream the request body into ``folder``; returns the staged files and the option fields.

    Options come from the query string (``format, dp, pp, tp, cp, filename``); multipart text
    fields of the same names override them.
    """
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > budget.max_wire:
        budget.take_wire(int(declared))  # refuse before reading a byte
    fields = {k: v for k, v in request.query_params.items() if k in FIELD_NAMES}
    unknown = sorted(set(request.query_params) - set(FIELD_NAMES))
    if unknown:
        raise ApiError(
            400,
            "bad_parameter",
            f"unknown query parameter(s) {', '.join(unknown)}; known: {', '.join(FIELD_NAMES)}",
        )
    ctype, params = parse_options_header(request.headers.get("content-type", ""))
    if ctype == b"multipart/form-data":
        boundary = params.get(b"boundary")
        if not boundary:
            raise ApiError(400, "bad_multipart", "multipart body without a boundary")
        if len(boundary) > MAX_BOUNDARY:  # RFC 2046: 1-70 characters
            raise ApiError(
                400,
                "bad_multipart",
                f"multipart boundary of {len(boundary)} characters (at most {MAX_BOUNDARY})",
            )
        state = _MultipartState(folder, budget)
        parser = MultipartParser(boundary, cast("MultipartCallbacks", state.callbacks()))

        def feed(data: bytes) -> None:
            parser.write(data)
            state.process()

        def finish() -> None:
            parser.finalize()
            state.process()

        try:
            # parsing, inflating and writing run in a worker thread, about 1 MiB at a time
            async for batch in batched(body_chunks(request, deadline=deadline)):
                await anyio.to_thread.run_sync(feed, batch)
            await anyio.to_thread.run_sync(finish)
        except ApiError:
            raise
        except Exception as exc:  # the multipart library's own parse errors
            if type(exc).__name__ in ("MultipartParseError", "FormParserError"):
                raise ApiError(400, "bad_multipart", f"malformed multipart body: {exc}") from exc
            raise
        finally:
            state.abort()
        if not state.files:
            raise ApiError(400, "no_files", "multipart upload holds no parts named 'files'")
        fields.update(state.fields)
        return state.files, fields
    name = safe_filename(fields.get("filename"), "trace")
    staged = await write_stream(folder, name, body_chunks(request, deadline=deadline), budget)
    return [staged], fields
