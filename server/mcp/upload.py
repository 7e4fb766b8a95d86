"""The pieces of ``upload_trace`` beyond argument handling: inline files (one or several),
server-side paths with the meta yaml beside a trace file, and the read options.

The read options mirror the CLI's (``--format --dp --pp --tp --cp --vpp --gpus-per-host
--layers-per-stage``) plus ``partial``; archives (``.tar.gz``, ``.tgz``, ``.tar``, ``.zip``) are
unpacked by the core for every surface (``server.core.archives``).
"""

from __future__ import annotations

import base64
import binascii
from pathlib import Path
from typing import Annotated, Any, Literal

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field

from server.core.security import resolve_allowed
from server.core.staging import FileSink, StagedFile, UploadBudget, safe_filename, write_bytes
from server.mcp.shared import NULL_IS_EMPTY


class InlineFile(BaseModel):
    """One file of a multi-file inline upload (per-rank traces, a meta yaml, an archive)."""

    name: Annotated[str, Field(min_length=1, max_length=255, description="file name, e.g. rank-3.json")]
    content: Annotated[str, NULL_IS_EMPTY, Field(description="the file's content")]
    encoding: Annotated[Literal["text", "base64"], Field(description="how content is encoded")] = "text"


def read_options(
    format: str, partial: bool, layers_per_stage: list[int] | None, **sizes: int | None
) -> dict[str, Any]:
    """The stored read options of an upload: only what was given (so the content hash of an
    upload without options stays what it was)."""
    out: dict[str, Any] = {k: v for k, v in sizes.items() if v is not None}
    if format:
        out["format"] = format
    if layers_per_stage:
        out["layers_per_stage"] = list(layers_per_stage)
    if partial:
        out["partial"] = True
    return out


INLINE_HINT = (
    "inline uploads are capped at {cap} bytes decoded in all; upload the files with "
    "`curl -F files=@FILE http://HOST:PORT/api/traces` (POST /api/traces) and pass the returned trace_id"
)


def decode_inline(content: str, encoding: str, cap: int, what: str = "content") -> bytes:
    """Decode inline content, refusing anything over the inline cap before decoding all of it."""
    if encoding == "base64":
        if len(content) * 3 // 4 > cap + 3:
            raise ToolError(f"{what} is about {len(content) * 3 // 4} bytes; " + INLINE_HINT.format(cap=cap))
        try:
            data = base64.b64decode(content, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ToolError(f"{what} is not valid base64 (encoding='base64'): {exc}") from exc
    else:
        data = content.encode("utf-8")
    if len(data) > cap:
        raise ToolError(f"{what} is {len(data)} bytes; " + INLINE_HINT.format(cap=cap))
    if not data:
        raise ToolError(f"{what} is empty")
    return data


def stage_inline(staging: Path, items: list[tuple[str, bytes]], budget: UploadBudget) -> list[StagedFile]:
    """Write decoded inline files into the staging folder."""
    return [
        write_bytes(staging, safe_filename(name, f"file{i}"), data, budget)
        for i, (name, data) in enumerate(items)
    ]


def server_side_sources(path: str, allow_dirs: tuple[Path, ...]) -> list[Path]:
    """The files ``path`` names inside an allowed folder; for a single trace file, also the meta
    yaml the CLI would read beside it (``meta-<name>.yaml`` for ``trace-<name>.*``, or
    ``meta.yaml``) when that lies inside an allowed folder too."""
    sources = resolve_allowed(path, allow_dirs)
    if len(sources) == 1 and not sources[0].name.lower().endswith((".yaml", ".yml")):
        from diagnosers.readers.artifact import find_meta_beside

        meta = find_meta_beside(sources[0])
        if meta is not None:
            real = meta.resolve()
            if real.is_file() and any(real.is_relative_to(d) for d in allow_dirs):
                sources.append(real)
    return sources


def copy_file(src: Path, staging: Path, budget: UploadBudget) -> StagedFile:
    """Stream a server-side file into the staging folder under the upload budget."""
    sink = FileSink(staging, safe_filename(src.name, "trace"), budget)
    try:
        with open(src, "rb") as fh:
            while chunk := fh.read(1024 * 1024):
                sink.write(chunk)
        return sink.close()
    finally:
        sink.abort()
