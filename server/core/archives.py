"""Unpacking uploaded archives (``.tar.gz``, ``.tgz``, ``.tar``, ``.zip``) in the staging folder.

Every surface hands its staged files through ``expand_archives`` before parsing, so a multi-rank
job uploads as one archive over REST, MCP and server-side paths alike. An archive is unpacked
under the same caps as any upload (its members count against the decompressed budget, gzip
members are inflated by the same sink), holds regular files only (a symlink, hard link, device or
FIFO member is refused, never created), and its member names are flattened to safe base names:
an absolute name or a ``..`` component (a path escape) is refused, two members with one base
name are refused as duplicates. The archive file itself is removed once unpacked.
"""

from __future__ import annotations

import stat
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import IO

from server.core.errors import ApiError
from server.core.staging import FileSink, StagedFile, UploadBudget, safe_filename

# After gunzip, ``x.tar.gz`` is staged as ``x.tar``; ``.tgz`` keeps its name.
ARCHIVE_SUFFIXES = (".tar", ".tgz", ".zip")
MAX_MEMBERS = 4096
CHUNK = 1024 * 1024


def is_archive(name: str) -> bool:
    return name.lower().endswith(ARCHIVE_SUFFIXES)


def expand_archives(staging: Path, files: list[StagedFile], budget: UploadBudget) -> list[StagedFile]:
    """``files`` with every archive among them replaced by its members (written beside them)."""
    if not any(is_archive(f.name) for f in files):
        return files
    out = [f for f in files if not is_archive(f.name)]
    for f in files:
        if is_archive(f.name):
            path = staging / f.name
            out += _unpack(path, staging, budget)
            path.unlink()
    if not out:
        raise ApiError(400, "empty_archive", "the uploaded archive holds no files")
    return out


def _refuse(archive: str, member: str, why: str) -> ApiError:
    return ApiError(400, "bad_archive", f"archive {archive!r}: member {member!r} {why}")


def _member_name(archive: str, raw: str) -> str | None:
    """The safe base name a member is staged under; None for a directory entry."""
    p = PurePosixPath(raw.replace("\\", "/"))
    if p.is_absolute() or ".." in p.parts or (p.parts and ":" in p.parts[0]):
        raise _refuse(archive, raw, "escapes the archive (an absolute path or '..'); give relative paths")
    if raw.endswith("/") or not p.name:
        return None
    if p.name.startswith("."):
        return None  # hidden files (.DS_Store, ._x) are skipped, as in a folder upload
    return safe_filename(p.name, "member")


def _tar_members(path: Path) -> Iterator[tuple[str, IO[bytes] | None]]:
    with tarfile.open(path, "r:*") as tar:
        for i, m in enumerate(tar):
            if i >= MAX_MEMBERS:
                raise ApiError(
                    400, "bad_archive", f"archive {path.name!r} holds more than {MAX_MEMBERS} members"
                )
            if m.isdir():
                continue
            if not m.isreg():
                kind = "a symlink" if m.issym() else "a hard link" if m.islnk() else "a device or FIFO"
                raise _refuse(path.name, m.name, f"is {kind}; archives may hold regular files only")
            yield m.name, tar.extractfile(m)


def _zip_members(path: Path) -> Iterator[tuple[str, IO[bytes] | None]]:
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
        if len(infos) > MAX_MEMBERS:
            raise ApiError(400, "bad_archive", f"archive {path.name!r} holds more than {MAX_MEMBERS} members")
        for info in infos:
            if info.is_dir():
                continue
            kind = stat.S_IFMT(info.external_attr >> 16)  # 0: no Unix mode recorded
            if kind and kind != stat.S_IFREG:
                raise _refuse(
                    path.name,
                    info.filename,
                    "is not a regular file (a symlink?); archives may hold regular files only",
                )
            with zf.open(info) as fh:
                yield info.filename, fh


def _unpack(path: Path, staging: Path, budget: UploadBudget) -> list[StagedFile]:
    # members count against the decompressed cap only: their bytes arrived once already
    member_budget = UploadBudget(2**62, budget.max_expanded)
    member_budget.expanded = budget.expanded - path.stat().st_size
    try:
        members = _zip_members(path) if zipfile.is_zipfile(path) else _tar_members(path)
        staged: list[StagedFile] = []
        for raw, fh in members:
            name = _member_name(path.name, raw)
            if name is None or fh is None:
                continue
            sink = FileSink(staging, name, member_budget)
            try:
                while chunk := fh.read(CHUNK):
                    sink.write(chunk)
                staged.append(sink.close())
            finally:
                sink.abort()
        return staged
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError) as exc:
        raise ApiError(400, "bad_archive", f"archive {path.name!r} cannot be read: {exc}") from exc
