"""Streaming uploads to disk: size caps, incremental gunzip with a decompression cap, hashing.

Used by the REST upload (request body chunks) and by the MCP inline upload (one decoded buffer).
A file is written under the staging folder only; the store moves the folder into place once the
whole upload has been read and parsed.
"""

from __future__ import annotations

import hashlib
import json
import re
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from server.core.errors import ApiError

GZIP_MAGIC = b"\x1f\x8b"
SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")
META_SUFFIXES = (".yaml", ".yml")
# an upload is processed off the event loop in pieces of this size (one thread hop each)
BATCH_BYTES = 1024 * 1024


def safe_filename(raw: str | None, fallback: str) -> str:
    """The base name of ``raw`` with anything outside ``[A-Za-z0-9._-]`` replaced by ``_``."""
    base = (raw or "").replace("\\", "/").rsplit("/", 1)[-1]
    name = SAFE_NAME.sub("_", base).lstrip(".")
    return name or fallback


class UploadBudget:
    """Shared byte budgets of one upload, across all of its files.

    ``wire`` counts bytes as received, ``expanded`` counts bytes after gunzip; exceeding either
    raises a 413 ``ApiError`` that names the limit.
    """

    def __init__(self, max_wire: int, max_expanded: int):
        self.max_wire, self.max_expanded = max_wire, max_expanded
        self.wire = 0
        self.expanded = 0

    def take_wire(self, n: int) -> None:
        self.wire += n
        if self.wire > self.max_wire:
            raise ApiError(
                413,
                "upload_too_large",
                f"upload exceeds the server's limit of {self.max_wire // (1024 * 1024)} MiB "
                "(--max-upload-mb); gzip the files or raise the limit",
            )

    def take_expanded(self, n: int) -> None:
        self.expanded += n
        if self.expanded > self.max_expanded:
            raise ApiError(
                413,
                "decompressed_too_large",
                f"decompressed upload exceeds {self.max_expanded // (1024 * 1024)} MiB "
                "(4 x --max-upload-mb); refusing a possible gzip bomb",
            )


@dataclass
class StagedFile:
    name: str
    sha256: str
    size: int


class FileSink:
    """Write one file to disk, gunzipping on the fly when it starts with the gzip magic."""

    CHUNK_OUT = 1024 * 1024

    def __init__(self, folder: Path, name: str, budget: UploadBudget):
        self.folder, self.raw_name, self.budget = folder, name, budget
        self._fh: Any = None
        self._inflate: Any = None
        self._head = b""
        self._hash = hashlib.sha256()
        self._size = 0
        self.name = name

    def _start(self, head: bytes) -> None:
        if head.startswith(GZIP_MAGIC):
            self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
            if self.name.lower().endswith(".gz"):
                self.name = self.name[:-3] or "upload"
        path = self.folder / self.name
        if path.exists():
            raise ApiError(400, "duplicate_file", f"two uploaded files are both named {self.name!r}")
        self._fh = open(path, "wb")  # noqa: SIM115 -- stays open across write() calls; close()/abort() end it

    def _emit(self, data: bytes) -> None:
        if data:
            self.budget.take_expanded(len(data))
            self._hash.update(data)
            self._size += len(data)
            self._fh.write(data)

    def _inflate_some(self, data: bytes) -> None:
        # max_length bounds every allocation: a bomb never materialises beyond one chunk.
        d = self._inflate
        while data:
            self._emit(d.decompress(data, self.CHUNK_OUT))
            data = d.unconsumed_tail
            if d.eof:
                rest = d.unused_data
                if rest.strip(b"\x00"):
                    # concatenated gzip members (``cat a.gz b.gz``) are valid gzip
                    self._inflate = d = zlib.decompressobj(16 + zlib.MAX_WBITS)
                    data = rest
                else:
                    data = b""

    def write(self, chunk: bytes) -> None:
        if not chunk:
            return
        self.budget.take_wire(len(chunk))
        if self._fh is None:
            self._head += chunk
            if len(self._head) < 2:
                return
            chunk, self._head = self._head, b""
            self._start(chunk)
        try:
            if self._inflate is not None:
                self._inflate_some(chunk)
            else:
                self._emit(chunk)
        except zlib.error as exc:
            raise ApiError(400, "bad_gzip", f"file {self.raw_name!r} is not valid gzip: {exc}") from exc

    def close(self) -> StagedFile:
        if self._fh is None:
            if not self._head:
                raise ApiError(400, "empty_file", f"uploaded file {self.raw_name!r} is empty")
            self._start(self._head)
            self._emit(self._head)
        if self._inflate is not None and not self._inflate.eof:
            self._fh.close()
            raise ApiError(400, "bad_gzip", f"file {self.raw_name!r} is a truncated gzip stream")
        self._fh.close()
        if self._size == 0:
            raise ApiError(400, "empty_file", f"uploaded file {self.raw_name!r} is empty")
        return StagedFile(self.name, self._hash.hexdigest(), self._size)

    def abort(self) -> None:
        if self._fh is not None and not self._fh.closed:
            self._fh.close()


async def batched(chunks: AsyncIterator[bytes], size: int = BATCH_BYTES) -> AsyncIterator[bytes]:
    """The chunks joined into pieces of at least ``size`` bytes (the last may be shorter)."""
    parts: list[bytes] = []
    held = 0
    async for chunk in chunks:
        parts.append(chunk)
        held += len(chunk)
        if held >= size:
            yield b"".join(parts)
            parts, held = [], 0
    if parts:
        yield b"".join(parts)


async def write_stream(
    folder: Path, name: str, chunks: AsyncIterator[bytes], budget: UploadBudget
) -> StagedFile:
    """Stream ``chunks`` into ``folder/name`` (gunzipped if gzip), within the budget.

    Inflating, hashing and writing run in a worker thread, a batch of about 1 MiB at a time:
    zlib, hashlib and file writes release the GIL, so the event loop stays free while a large
    upload streams in (a cap is noticed within one batch of being passed)."""
    sink = FileSink(folder, name, budget)
    try:
        async for batch in batched(chunks):
            await anyio.to_thread.run_sync(sink.write, batch)
        return await anyio.to_thread.run_sync(sink.close)
    finally:
        sink.abort()


def write_bytes(folder: Path, name: str, data: bytes, budget: UploadBudget) -> StagedFile:
    """Write one in-memory buffer the same way as a stream (inline MCP uploads)."""
    sink = FileSink(folder, name, budget)
    try:
        sink.write(data)
        return sink.close()
    finally:
        sink.abort()


def content_hash(files: list[StagedFile], options: dict[str, Any]) -> str:
    """SHA-256 over sorted (name, file hash) pairs and the read options.

    Names take part because readers may take the rank from a file name; options because the same
    files read with other parallel sizes are another trace.
    """
    h = hashlib.sha256()
    for f in sorted(files, key=lambda f: f.name):
        h.update(f"{f.name}\0{f.sha256}\n".encode())
    h.update(json.dumps(options, sort_keys=True).encode())
    return h.hexdigest()
