"""Storage: a database plus a data folder. One interface (:class:`TraceStore`), two
implementations: :class:`Store` (embedded SQLite in the data folder; nothing to install; the
default) and :class:`PostgresStore` (several server replicas over one PostgreSQL database and one
shared data folder). The SQL lives once, here and in ``jobs_store``; ``db`` runs it on either.

Layout under the data folder::

    lens.sqlite3          traces (one row per stored upload) and results (cached JSON)
    traces/<trace_id>/    the upload's files, decompressed, under their sanitised names
    tmp/<random>/         staging for uploads in flight

Atomicity: an upload is written into ``tmp/``, then moved into ``traces/`` with one ``rename``
and only then recorded in the database, so a trace row always names a complete folder. On open,
``tmp/`` is emptied and any ``traces/`` folder without a row (a crash between rename and insert)
is removed. Results are single-row upserts, atomic by SQLite's transactions.

With PostgreSQL, ``traces/`` and ``windows/`` are shared by every replica, while each replica
stages under its own ``tmp/<replica>/`` and cleans only that one on start; a ``traces/`` folder
without a row is removed only when it is older than an hour (another replica may be between its
rename and its insert), and rows are never dropped for a missing folder (a mount may be late).

Trace ids are random 128-bit handles (32 hex digits). The content hash (SHA-256 over the file
names, their contents and the read options) deduplicates uploads.
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
import socket
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from server.core import datalock
from server.core.db import Database, PgDatabase, SqliteDatabase
from server.core.jobs_store import SCHEMA as JOBS_SCHEMA

SCHEMA = """
CREATE TABLE IF NOT EXISTS traces (
    id TEXT PRIMARY KEY,
    content_hash TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    created_at TEXT NOT NULL,
    size_bytes INTEGER NOT NULL,
    files TEXT NOT NULL,
    options TEXT NOT NULL,
    summary TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS results (
    trace_id TEXT NOT NULL REFERENCES traces(id) ON DELETE CASCADE,
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    body TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (trace_id, kind, key)
);
CREATE INDEX IF NOT EXISTS traces_created ON traces(created_at);
"""

# (version, script): append only; each script IF NOT EXISTS so pre-versioning stores upgrade
MIGRATIONS: list[tuple[int, str]] = [(1, SCHEMA), (2, JOBS_SCHEMA)]
SCHEMA_VERSION = MIGRATIONS[-1][0]
ORPHAN_AGE_S = 3600.0

TRACE_ID_RE = re.compile(r"^[0-9a-f]{32}$")
STAGING_RE = re.compile(r"^[0-9a-f]{16}$")


def new_trace_id() -> str:
    """A random 128-bit handle as 32 lowercase hex digits."""
    return secrets.token_hex(16)


@dataclass(frozen=True)
class TraceRecord:
    """One stored trace: where its files are and what the upload said about it."""

    id: str
    content_hash: str
    name: str
    created_at: str
    size_bytes: int
    files: list[str]
    options: dict[str, Any]
    summary: dict[str, Any]


@runtime_checkable
class TraceStore(Protocol):
    """What the service needs of a store (both implementations below)."""

    data_dir: Path
    traces_dir: Path
    tmp_dir: Path

    @property
    def db(self) -> Database: ...

    def open(self) -> TraceStore: ...

    def close(self) -> None: ...

    def schema_version(self) -> int: ...

    def staging_dir(self) -> Path: ...

    def discard(self, staging: Path) -> None: ...

    def find_by_hash(self, content_hash: str) -> TraceRecord | None: ...

    def commit_trace(
        self,
        staging: Path,
        *,
        content_hash: str,
        name: str,
        files: list[str],
        options: dict[str, Any],
        summary: dict[str, Any],
    ) -> tuple[TraceRecord, bool]: ...

    def get(self, trace_id: str) -> TraceRecord | None: ...

    def page(self, limit: int, offset: int) -> tuple[int, list[TraceRecord]]: ...

    def delete(self, trace_id: str) -> bool: ...

    def created_before(self, cutoff: datetime) -> list[str]: ...

    def file_paths(self, record: TraceRecord) -> list[Path]: ...

    def get_result(self, trace_id: str, kind: str, key: str = "") -> str | None: ...

    def put_result(self, trace_id: str, kind: str, key: str, body: str) -> None: ...

    def cached_kinds(self, trace_id: str) -> set[str]: ...


class _SqlStore(ABC):
    """The store's logic over any :class:`server.core.db.Database` (subclasses open it)."""

    shared_folder = False  # True: other processes write traces/ too (PostgreSQL replicas)

    def __init__(self, data_dir: Path):
        self.data_dir = Path(data_dir)
        self.traces_dir = self.data_dir / "traces"
        self.tmp_dir = self.data_dir / "tmp"
        self._db_: Database | None = None
        self._locked = False  # holds the data folder's lock (SQLite: one server per folder)

    @property
    def db(self) -> Database:
        if self._db_ is None:
            raise RuntimeError("store is not open")
        return self._db_

    # -- lifecycle ---------------------------------------------------------------------------

    @abstractmethod
    def _connect(self) -> Database:
        """A new connection (pool) to this store's database."""

    def open(self) -> TraceStore:
        """Create the folders, apply the missing schema versions, then clear what an
        interrupted upload left behind."""
        self.traces_dir.mkdir(parents=True, exist_ok=True)
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        if not self.shared_folder:
            # one server per SQLite folder: a second live server stops here, before any cleanup
            datalock.acquire(self.data_dir)
            self._locked = True
        self._db_ = self._connect()
        self._db_.migrate(MIGRATIONS)
        self._recover()
        return self

    def close(self) -> None:
        """Close the database (idempotent); the data folder stays as it is."""
        if self._db_ is not None:
            self._db_.close()
            self._db_ = None
        if self._locked:
            datalock.release(self.data_dir)
            self._locked = False

    def schema_version(self) -> int:
        """The highest applied schema version."""
        rows = self.db.read("SELECT MAX(version) AS v FROM schema_version")
        return int(rows[0]["v"] or 0)

    def _recover(self) -> None:
        # only names this server makes: staging folders (16 hex digits) and trace folders
        # (32 hex digits); anything else a person put here is left alone
        for leftover in self.tmp_dir.iterdir():
            if STAGING_RE.match(leftover.name) or leftover.name.startswith("deleted-"):
                shutil.rmtree(leftover, ignore_errors=True)
        known = {r["id"] for r in self.db.read("SELECT id FROM traces")}
        horizon = time.time() - ORPHAN_AGE_S
        for folder in self.traces_dir.iterdir():
            if folder.name in known or not TRACE_ID_RE.match(folder.name):
                continue
            if self.shared_folder and folder.stat().st_mtime > horizon:
                continue  # another replica may be committing it right now
            shutil.rmtree(folder, ignore_errors=True)
        if self.shared_folder:
            return
        missing = [tid for tid in known if not (self.traces_dir / tid).is_dir()]
        for tid in missing:
            with self.db.tx() as db:
                db.execute("DELETE FROM traces WHERE id = ?", (tid,))

    # -- uploads -----------------------------------------------------------------------------

    def staging_dir(self) -> Path:
        """A fresh empty folder under ``tmp/`` for one upload in flight."""
        path = self.tmp_dir / secrets.token_hex(8)
        path.mkdir()
        return path

    def discard(self, staging: Path) -> None:
        """Delete a staging folder and whatever an upload wrote into it (missing is fine)."""
        shutil.rmtree(staging, ignore_errors=True)

    def find_by_hash(self, content_hash: str) -> TraceRecord | None:
        """The stored trace with this content hash, or None."""
        rows = self.db.read("SELECT * FROM traces WHERE content_hash = ?", (content_hash,))
        return _record(rows[0]) if rows else None

    def commit_trace(
        self,
        staging: Path,
        *,
        content_hash: str,
        name: str,
        files: list[str],
        options: dict[str, Any],
        summary: dict[str, Any],
    ) -> tuple[TraceRecord, bool]:
        """Move a staged upload into place and record it; ``(record, created)``.

        When the same content hash is already stored (a concurrent duplicate upload), the
        staging folder is dropped and the existing record is returned with ``created=False``.
        """
        size = sum(f.stat().st_size for f in staging.iterdir())
        with self.db.tx(key=f"trace:{content_hash}") as db:
            row = db.execute("SELECT * FROM traces WHERE content_hash = ?", (content_hash,)).fetchone()
            if row is not None:
                self.discard(staging)
                return _record(row), False
            trace_id = new_trace_id()
            staging.rename(self.traces_dir / trace_id)
            created = datetime.now(UTC).isoformat(timespec="seconds")
            try:
                db.execute(
                    "INSERT INTO traces VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        trace_id,
                        content_hash,
                        name,
                        created,
                        size,
                        json.dumps(files),
                        json.dumps(options, sort_keys=True),
                        json.dumps(summary),
                    ),
                )
            except BaseException:  # a full disk: the folder goes, the stored traces stay as they were
                shutil.rmtree(self.traces_dir / trace_id, ignore_errors=True)
                raise
        record = self.get(trace_id)
        assert record is not None
        return record, True

    # -- deletion ----------------------------------------------------------------------------

    def delete(self, trace_id: str) -> bool:
        """Forget one trace: its row, its cached results and its folder; False when unknown.

        The rows go first, then the folder is moved under ``tmp/`` (one rename) and removed, so
        a crash in between leaves only a folder the next start clears. Nothing else is touched.
        """
        if not TRACE_ID_RE.match(trace_id):
            return False
        with self.db.tx() as db:
            db.execute("DELETE FROM results WHERE trace_id = ?", (trace_id,))
            gone = db.execute("DELETE FROM traces WHERE id = ?", (trace_id,)).rowcount
        if not gone:
            return False
        folder = self.traces_dir / trace_id
        if folder.is_dir():
            doomed = self.tmp_dir / f"deleted-{trace_id}"
            folder.rename(doomed)
            shutil.rmtree(doomed, ignore_errors=True)
        return True

    def created_before(self, cutoff: datetime) -> list[str]:
        """Ids of the traces stored before ``cutoff`` (an aware datetime), oldest first."""
        stamp = cutoff.astimezone(UTC).isoformat(timespec="seconds")
        rows = self.db.read("SELECT id FROM traces WHERE created_at < ? ORDER BY created_at", (stamp,))
        return [r["id"] for r in rows]

    # -- reads -------------------------------------------------------------------------------

    def get(self, trace_id: str) -> TraceRecord | None:
        """The record of a trace id, or None (also for strings that are not trace ids)."""
        if not TRACE_ID_RE.match(trace_id):
            return None
        rows = self.db.read("SELECT * FROM traces WHERE id = ?", (trace_id,))
        return _record(rows[0]) if rows else None

    def page(self, limit: int, offset: int) -> tuple[int, list[TraceRecord]]:
        """(total, newest-first page)."""
        total = self.db.read("SELECT COUNT(*) AS n FROM traces")[0]["n"]
        # insertion order breaks ties of the one-second timestamps (rowid; PostgreSQL: ctid is
        # not stable, so the id, which is random: ties then have no particular order)
        tie = "rowid" if self.db.dialect == "sqlite" else "id"
        rows = self.db.read(
            f"SELECT * FROM traces ORDER BY created_at DESC, {tie} DESC LIMIT ? OFFSET ?", (limit, offset)
        )
        return int(total), [_record(r) for r in rows]

    def file_paths(self, record: TraceRecord) -> list[Path]:
        """The stored files of a trace, in the order the upload recorded them."""
        folder = self.traces_dir / record.id
        return [folder / name for name in record.files]

    def get_result(self, trace_id: str, kind: str, key: str = "") -> str | None:
        """The cached body of a result (``kind``: whatif, diagnosis, scenario, ...; ``key`` tells
        variants apart, empty for the standard one), or None."""
        rows = self.db.read(
            "SELECT body FROM results WHERE trace_id = ? AND kind = ? AND key = ?", (trace_id, kind, key)
        )
        return str(rows[0]["body"]) if rows else None

    def put_result(self, trace_id: str, kind: str, key: str, body: str) -> None:
        """Store (or replace) a result body; one upsert, so readers see the old or the new one."""
        created = datetime.now(UTC).isoformat(timespec="seconds")
        with self.db.tx() as db:
            db.execute(
                "INSERT INTO results VALUES (?, ?, ?, ?, ?) ON CONFLICT (trace_id, kind, key)"
                " DO UPDATE SET body = excluded.body, created_at = excluded.created_at",
                (trace_id, kind, key, body, created),
            )

    def cached_kinds(self, trace_id: str) -> set[str]:
        """The kinds of standard results (empty key) already cached for a trace."""
        rows = self.db.read("SELECT DISTINCT kind FROM results WHERE trace_id = ? AND key = ''", (trace_id,))
        return {str(r["kind"]) for r in rows}


class Store(_SqlStore):
    """The embedded store: SQLite in ``<data_dir>/lens.sqlite3`` (one process per data folder)."""

    def _connect(self) -> Database:
        return SqliteDatabase(self.data_dir / "lens.sqlite3")


def default_replica_id() -> str:
    """A replica's name when none is given: host name and a random suffix (a new staging
    folder per start; the old one is the previous process's, cleaned by nobody but its owner)."""
    host = re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname())[:40] or "host"
    return f"{host}-{secrets.token_hex(3)}"


class PostgresStore(_SqlStore):
    """Replicas over one PostgreSQL database: ``dsn`` is a libpq URL (``postgresql://...``),
    ``data_dir`` the folder every replica mounts, ``replica`` names this process's staging folder
    ``tmp/<replica>/`` (only it cleans that one; give a stable name to clean after a crash)."""

    shared_folder = True

    def __init__(self, data_dir: Path, dsn: str, replica: str | None = None, pool: int = 4):
        super().__init__(data_dir)
        self.dsn = dsn
        self.replica = replica or default_replica_id()
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", self.replica):
            raise ValueError(f"replica id {self.replica!r}: use 1-64 letters, digits, '_', '.', '-'")
        self.tmp_dir = self.data_dir / "tmp" / self.replica
        self.pool = pool

    def _connect(self) -> Database:
        return PgDatabase(self.dsn, size=self.pool)


def open_store(data_dir: Path, database: str | None = None, replica: str | None = None) -> TraceStore:
    """The store a server runs on: SQLite in the data folder by default, PostgreSQL for a
    ``postgresql://`` (or ``postgres://``) URL. Not yet opened."""
    if not database or database.startswith("sqlite:"):
        return Store(data_dir)
    if database.startswith(("postgresql://", "postgres://")):
        return PostgresStore(data_dir, database, replica)
    raise ValueError(
        f"--database {database!r}: give a postgresql://user@host:port/dbname URL (or omit it for SQLite)"
    )


def _record(row: Any) -> TraceRecord:
    if isinstance(row, dict):
        row = tuple(row.values())
    tid, chash, name, created, size, files, options, summary = row
    return TraceRecord(
        id=tid,
        content_hash=chash,
        name=name,
        created_at=created,
        size_bytes=int(size),
        files=json.loads(files),
        options=json.loads(options),
        summary=json.loads(summary),
    )
