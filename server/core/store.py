"""Storage: an embedded SQLite database plus a data folder; nothing to install.

Layout under the data folder::

    lens.sqlite3          traces (one row per stored upload) and results (cached JSON)
    traces/<trace_id>/    the upload's files, decompressed, under their sanitised names
    tmp/<random>/         staging for uploads in flight

Atomicity: an upload is written into ``tmp/``, then moved into ``traces/`` with one ``rename``
and only then recorded in the database, so a trace row always names a complete folder. On open,
``tmp/`` is emptied and any ``traces/`` folder without a row (a crash between rename and insert)
is removed. Results are single-row upserts, atomic by SQLite's transactions.

Trace ids are random 128-bit handles (32 hex digits). The content hash (SHA-256 over the file
names, their contents and the read options) deduplicates uploads.
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
import sqlite3
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

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

TRACE_ID_RE = re.compile(r"^[0-9a-f]{32}$")


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


class Store:
    """Thread-safe access to the database and the data folder (one connection, one lock).

    Calls are short (row reads and writes); analyses run outside the lock.
    """

    def __init__(self, data_dir: Path):
        self.data_dir = Path(data_dir)
        self.traces_dir = self.data_dir / "traces"
        self.tmp_dir = self.data_dir / "tmp"
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def open(self) -> Store:
        """Create the folders and schema, then clear what an interrupted upload left behind."""
        self.traces_dir.mkdir(parents=True, exist_ok=True)
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.data_dir / "lens.sqlite3", check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.executescript(SCHEMA)
        self._conn = conn
        self._recover()
        return self

    def close(self) -> None:
        """Close the database connection (idempotent); the data folder stays as it is."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError("store is not open")
        return self._conn

    def _recover(self) -> None:
        for leftover in self.tmp_dir.iterdir():
            shutil.rmtree(leftover, ignore_errors=True)
        with self._lock:
            known = {row[0] for row in self._db().execute("SELECT id FROM traces")}
        for folder in self.traces_dir.iterdir():
            if folder.name not in known:
                shutil.rmtree(folder, ignore_errors=True)
        missing = [tid for tid in known if not (self.traces_dir / tid).is_dir()]
        with self._lock:
            for tid in missing:
                self._db().execute("DELETE FROM traces WHERE id = ?", (tid,))

    # -- uploads -----------------------------------------------------------------------------

    def staging_dir(self) -> Path:
        """A fresh empty folder under ``tmp/`` for one upload in flight."""
        path = self.tmp_dir / secrets.token_hex(8)
        path.mkdir()
        return path

    @staticmethod
    def discard(staging: Path) -> None:
        """Delete a staging folder and whatever an upload wrote into it (missing is fine)."""
        shutil.rmtree(staging, ignore_errors=True)

    def find_by_hash(self, content_hash: str) -> TraceRecord | None:
        """The stored trace with this content hash, or None."""
        with self._lock:
            row = (
                self._db().execute("SELECT * FROM traces WHERE content_hash = ?", (content_hash,)).fetchone()
            )
        return _record(row) if row else None

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
        with self._lock:
            row = (
                self._db().execute("SELECT * FROM traces WHERE content_hash = ?", (content_hash,)).fetchone()
            )
            if row is not None:
                self.discard(staging)
                return _record(row), False
            trace_id = new_trace_id()
            staging.rename(self.traces_dir / trace_id)
            created = datetime.now(UTC).isoformat(timespec="seconds")
            self._db().execute(
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
        with self._lock:
            db = self._db()
            db.execute("BEGIN")
            try:
                db.execute("DELETE FROM results WHERE trace_id = ?", (trace_id,))
                gone = db.execute("DELETE FROM traces WHERE id = ?", (trace_id,)).rowcount
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
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
        with self._lock:
            rows = (
                self._db()
                .execute("SELECT id FROM traces WHERE created_at < ? ORDER BY created_at", (stamp,))
                .fetchall()
            )
        return [r[0] for r in rows]

    # -- reads -------------------------------------------------------------------------------

    def get(self, trace_id: str) -> TraceRecord | None:
        """The record of a trace id, or None (also for strings that are not trace ids)."""
        if not TRACE_ID_RE.match(trace_id):
            return None
        with self._lock:
            row = self._db().execute("SELECT * FROM traces WHERE id = ?", (trace_id,)).fetchone()
        return _record(row) if row else None

    def page(self, limit: int, offset: int) -> tuple[int, list[TraceRecord]]:
        """(total, newest-first page)."""
        with self._lock:
            total = self._db().execute("SELECT COUNT(*) FROM traces").fetchone()[0]
            rows = (
                self._db()
                .execute(
                    "SELECT * FROM traces ORDER BY created_at DESC, rowid DESC LIMIT ? OFFSET ?",
                    (limit, offset),
                )
                .fetchall()
            )
        return int(total), [_record(r) for r in rows]

    def file_paths(self, record: TraceRecord) -> list[Path]:
        """The stored files of a trace, in the order the upload recorded them."""
        folder = self.traces_dir / record.id
        return [folder / name for name in record.files]

    def get_result(self, trace_id: str, kind: str, key: str = "") -> str | None:
        """The cached body of a result (``kind``: whatif, diagnosis, scenario, ...; ``key`` tells
        variants apart, empty for the standard one), or None."""
        with self._lock:
            row = (
                self._db()
                .execute(
                    "SELECT body FROM results WHERE trace_id = ? AND kind = ? AND key = ?",
                    (trace_id, kind, key),
                )
                .fetchone()
            )
        return str(row[0]) if row else None

    def put_result(self, trace_id: str, kind: str, key: str, body: str) -> None:
        """Store (or replace) a result body; one upsert, so readers see the old or the new one."""
        created = datetime.now(UTC).isoformat(timespec="seconds")
        with self._lock:
            self._db().execute(
                "INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?)",
                (trace_id, kind, key, body, created),
            )

    def cached_kinds(self, trace_id: str) -> set[str]:
        """The kinds of standard results (empty key) already cached for a trace."""
        with self._lock:
            rows = (
                self._db()
                .execute("SELECT DISTINCT kind FROM results WHERE trace_id = ? AND key = ''", (trace_id,))
                .fetchall()
            )
        return {str(r[0]) for r in rows}


def _record(row: tuple[Any, ...]) -> TraceRecord:
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
