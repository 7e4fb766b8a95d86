"""The database under a store: one small interface, two engines (SQLite, PostgreSQL).

The stores write their SQL once, in SQLite's dialect with ``?`` placeholders; :class:`PgDatabase`
rewrites the few differences on the way (placeholders, ``INSERT OR IGNORE``, the reserved word
``window``, column types in DDL). Statements that differ more than that ask ``dialect``.

Write transactions: SQLite's ``BEGIN IMMEDIATE`` takes the database's one write lock up front,
so a read-then-write in a transaction cannot interleave with another writer. PostgreSQL runs
transactions concurrently; a caller whose read-then-write must not interleave passes a ``key``,
and the transaction first takes ``pg_advisory_xact_lock`` on it (released at commit). Claims
need no key: they are one ``UPDATE ... WHERE id = (SELECT ... FOR UPDATE SKIP LOCKED)``.

Migrations are versioned: ``schema_version`` holds every applied version; ``migrate`` applies the
missing ones in order (under an advisory lock on PostgreSQL, so replicas starting together apply
each once). Version 1 is the trace store, version 2 the service loop's tables; both are written
``IF NOT EXISTS``, so a store created before versioning upgrades on start.
"""

from __future__ import annotations

import queue
import re
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol


class Cursor(Protocol):
    """What the stores use of a DB-API cursor."""

    rowcount: int

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Conn(Protocol):
    """A connection inside a transaction: ``execute`` with ``?`` placeholders."""

    def execute(self, sql: str, args: Sequence[Any] = ...) -> Any: ...


class Database(Protocol):
    """One engine: write transactions, plain reads as dicts, versioned migrations."""

    dialect: str

    def tx(self, key: str | None = None) -> Any: ...  # a context manager yielding a Conn

    def read(self, sql: str, args: Sequence[Any] = ()) -> list[dict[str, Any]]: ...

    def migrate(self, migrations: Sequence[tuple[int, str]]) -> list[int]: ...

    def close(self) -> None: ...


VERSION_TABLE = (
    "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)"
)


class SqliteDatabase:
    """One SQLite connection (WAL, foreign keys) behind one lock: calls are short row reads
    and writes, and SQLite has one writer anyway."""

    dialect = "sqlite"

    def __init__(self, path: Path):
        conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA busy_timeout=10000")
        self._conn: sqlite3.Connection | None = conn
        self.lock = threading.Lock()

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError("store is not open")
        return self._conn

    @contextmanager
    def tx(self, key: str | None = None) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on error); ``key`` is not needed."""
        with self.lock:
            db = self._db()
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def read(self, sql: str, args: Sequence[Any] = ()) -> list[dict[str, Any]]:
        with self.lock:
            cur = self._db().execute(sql, tuple(args))
            cols = [c[0] for c in cur.description]
            return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]

    def migrate(self, migrations: Sequence[tuple[int, str]]) -> list[int]:
        """Apply the versions not yet in ``schema_version``, each in its own transaction."""
        with self.lock:
            self._db().execute(VERSION_TABLE)
        applied: list[int] = []
        for version, script in migrations:
            with self.lock:
                db = self._db()
                if db.execute("SELECT 1 FROM schema_version WHERE version=?", (version,)).fetchone():
                    continue
                # executescript commits first; the script is IF NOT EXISTS throughout, so a crash
                # between it and the version row re-runs it harmlessly on the next start
                db.executescript(script)
                db.execute("INSERT INTO schema_version VALUES (?, ?)", (version, time.time()))
            applied.append(version)
        return applied

    def close(self) -> None:
        with self.lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


# -- PostgreSQL ----------------------------------------------------------------------------------

_WINDOW_RE = re.compile(r'(?<![\w"])window(?![\w"])')
_IGNORE_RE = re.compile(r"^\s*INSERT OR IGNORE INTO", re.IGNORECASE)


def pg_sql(sql: str) -> str:
    """SQLite-dialect statement → PostgreSQL: ``?`` → ``%s``, ``INSERT OR IGNORE`` → ``ON
    CONFLICT DO NOTHING``, the column ``window`` quoted (a reserved word there). Assumes no
    ``?`` or ``%`` inside string literals of the statement (values travel as parameters)."""
    out = _WINDOW_RE.sub('"window"', sql).replace("?", "%s")
    if _IGNORE_RE.match(out):
        out = _IGNORE_RE.sub("INSERT INTO", out) + " ON CONFLICT DO NOTHING"
    return out


def pg_ddl(script: str) -> str:
    """SQLite DDL → PostgreSQL: integer keys become ``BIGSERIAL``, integers ``BIGINT`` (sizes
    may pass 2 GiB), ``REAL`` ``DOUBLE PRECISION`` (Unix seconds need the precision)."""
    s = script.replace("INTEGER PRIMARY KEY AUTOINCREMENT", "BIGSERIAL PRIMARY KEY")
    s = re.sub(r"\bINTEGER\b", "BIGINT", s)
    s = re.sub(r"\bREAL\b", "DOUBLE PRECISION", s)
    return _WINDOW_RE.sub('"window"', s)


class _PgConn:
    """A psycopg connection inside a transaction, taking SQLite-dialect statements."""

    def __init__(self, conn: Any):
        self.conn = conn

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Any:
        return self.conn.execute(pg_sql(sql), tuple(args))


class PgDatabase:
    """A small pool of psycopg 3 connections (autocommit; transactions explicit). psycopg is
    imported here only, so a SQLite-only install never needs it."""

    dialect = "postgresql"

    def __init__(self, dsn: str, size: int = 4, connect_timeout: float = 10.0):
        try:
            import psycopg
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise RuntimeError(
                "--database postgresql://... needs psycopg 3: pip install 'straggler-lens[postgres]'"
            ) from exc
        self._psycopg = psycopg
        self.dsn = dsn
        self.size = size
        self.timeout = connect_timeout
        self._free: queue.LifoQueue[Any] = queue.LifoQueue()
        self._made = 0
        self._mk = threading.Lock()
        self._closed = False
        self._release(self._connect())  # fail at start, not at the first request

    def _connect(self) -> Any:
        conn = self._psycopg.connect(self.dsn, autocommit=True, connect_timeout=int(self.timeout))
        with self._mk:
            self._made += 1
        return conn

    def _acquire(self) -> Any:
        if self._closed:
            raise RuntimeError("store is not open")
        try:
            conn = self._free.get_nowait()
        except queue.Empty:
            with self._mk:
                grow = self._made < self.size
            conn = self._connect() if grow else self._free.get(timeout=30)
        if conn.closed or conn.broken:
            with self._mk:
                self._made -= 1
            conn = self._connect()
        return conn

    def _release(self, conn: Any) -> None:
        if self._closed:
            conn.close()
        else:
            self._free.put(conn)

    @contextmanager
    def tx(self, key: str | None = None) -> Iterator[_PgConn]:
        """One transaction on a pooled connection; with ``key``, serialised with every other
        transaction on the same key (an advisory transaction lock)."""
        conn = self._acquire()
        try:
            with conn.transaction():
                if key is not None:
                    conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (key,))
                yield _PgConn(conn)
        finally:
            self._release(conn)

    def read(self, sql: str, args: Sequence[Any] = ()) -> list[dict[str, Any]]:
        conn = self._acquire()
        try:
            cur = conn.execute(pg_sql(sql), tuple(args))
            cols = [c.name for c in cur.description]
            return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
        finally:
            self._release(conn)

    def migrate(self, migrations: Sequence[tuple[int, str]]) -> list[int]:
        """Apply the missing versions, all under one advisory lock (replicas starting together)."""
        applied: list[int] = []
        with self.tx(key="straggler-lens:migrate") as db:
            db.execute(pg_ddl(VERSION_TABLE))
            done = {int(r[0]) for r in db.execute("SELECT version FROM schema_version").fetchall()}
            for version, script in migrations:
                if version in done:
                    continue
                for stmt in (s.strip() for s in pg_ddl(script).split(";")):
                    if stmt:
                        db.conn.execute(stmt)
                db.execute("INSERT INTO schema_version VALUES (?, ?)", (version, time.time()))
                applied.append(version)
        return applied

    def close(self) -> None:
        self._closed = True
        while True:
            try:
                self._free.get_nowait().close()
            except queue.Empty:
                break
