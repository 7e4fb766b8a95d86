"""Jobs, profiling windows, the analysis queue and the alert outbox, in the store's database.

Tables (added next to ``traces`` / ``results``; plain SQL that a PostgreSQL store mirrors):

- ``jobs``: one row per job name; ``windows``: one profiling session of a job, with its status
  ``receiving | analysing | done | failed`` (``reason`` says why it failed), the expected world
  size, the grace deadline (``grace_until``: assemble with what arrived after it), the stored
  trace once assembled and a JSON summary of its diagnosis; ``window_ranks``: which ranks arrived.
- ``tasks``: the analysis queue. A worker *claims* a task with a lease (``lease_owner``,
  ``lease_until``); a lease that runs out (the worker died) makes the task claimable again, so
  nothing is forgotten after a restart; ``tries`` is bounded by ``max_tries``.
- ``alerts`` (what was raised), ``alert_state`` (per rule, job and cause: active or cleared, when
  last sent: the quiet rules), ``outbox`` (one row per alert and destination, leased like tasks,
  retried with exponential backoff and jitter up to ``max_tries``) and ``deliveries`` (one row
  per try: the delivery log).

Concurrency: every state change is one ``UPDATE ... WHERE <expected state>`` (or one write
transaction: ``BEGIN IMMEDIATE`` on SQLite; on PostgreSQL one keyed by the job, see
``server.core.db``), so two replicas sharing the database never both claim a task or an outbox
row and never finish one window twice. On PostgreSQL the claim sub-selects add
``FOR UPDATE SKIP LOCKED``: concurrent claimers skip a row another is taking instead of waiting.
Times are Unix seconds (floats); ``now`` is a parameter so tests and replicas agree on one clock per call.
"""

from __future__ import annotations

import json
import random
import secrets
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    name TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS windows (
    job TEXT NOT NULL REFERENCES jobs(name),
    id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    status TEXT NOT NULL,
    reason TEXT,
    world_size INTEGER,
    options TEXT NOT NULL,
    created_at REAL NOT NULL,
    grace_until REAL NOT NULL,
    updated_at REAL NOT NULL,
    trace_id TEXT,
    summary TEXT,
    notes TEXT NOT NULL DEFAULT '[]',
    PRIMARY KEY (job, id)
);
CREATE INDEX IF NOT EXISTS windows_status ON windows(status, grace_until);
CREATE TABLE IF NOT EXISTS window_ranks (
    job TEXT NOT NULL,
    window TEXT NOT NULL,
    rank INTEGER NOT NULL,
    filename TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    size_bytes INTEGER NOT NULL,
    received_at REAL NOT NULL,
    PRIMARY KEY (job, window, rank)
);
CREATE TABLE IF NOT EXISTS tasks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    job TEXT NOT NULL,
    window TEXT NOT NULL,
    state TEXT NOT NULL,
    tries INTEGER NOT NULL DEFAULT 0,
    max_tries INTEGER NOT NULL,
    not_before REAL NOT NULL,
    lease_owner TEXT,
    lease_until REAL,
    created_at REAL NOT NULL,
    finished_at REAL,
    error TEXT,
    UNIQUE (kind, job, window)
);
CREATE INDEX IF NOT EXISTS tasks_due ON tasks(state, not_before);
CREATE TABLE IF NOT EXISTS alerts (
    id TEXT PRIMARY KEY,
    rule TEXT NOT NULL,
    job TEXT NOT NULL,
    window TEXT NOT NULL,
    cause TEXT NOT NULL,
    kind TEXT NOT NULL,
    created_at REAL NOT NULL,
    payload TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS alert_state (
    rule TEXT NOT NULL,
    job TEXT NOT NULL,
    cause TEXT NOT NULL,
    active INTEGER NOT NULL,
    first_at REAL NOT NULL,
    last_sent_at REAL NOT NULL,
    last_window TEXT NOT NULL,
    PRIMARY KEY (rule, job, cause)
);
CREATE TABLE IF NOT EXISTS outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    alert_id TEXT NOT NULL REFERENCES alerts(id),
    destination TEXT NOT NULL,
    state TEXT NOT NULL,
    tries INTEGER NOT NULL DEFAULT 0,
    max_tries INTEGER NOT NULL,
    next_at REAL NOT NULL,
    lease_owner TEXT,
    lease_until REAL,
    created_at REAL NOT NULL,
    delivered_at REAL,
    last_error TEXT,
    UNIQUE (alert_id, destination)
);
CREATE INDEX IF NOT EXISTS outbox_due ON outbox(state, next_at);
CREATE TABLE IF NOT EXISTS deliveries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    outbox_id INTEGER NOT NULL REFERENCES outbox(id),
    try INTEGER NOT NULL,
    owner TEXT NOT NULL,
    started_at REAL NOT NULL,
    finished_at REAL,
    status INTEGER,
    error TEXT
);
"""

WINDOW_STATUSES = ("receiving", "analysing", "done", "failed")


def new_owner() -> str:
    """A lease owner id for one server process (random, so a restarted process is a new owner)."""
    return f"w-{secrets.token_hex(6)}"


def backoff_delay(tries: int, base: float, cap: float, rng: random.Random | None = None) -> float:
    """Seconds before try ``tries + 1``: ``base * 2**(tries-1)`` capped at ``cap``, times a
    uniform jitter in [0.5, 1.5) so that deliveries failing together do not retry together."""
    r = rng or random
    return float(min(cap, base * (2 ** max(0, tries - 1))) * r.uniform(0.5, 1.5))


@dataclass(frozen=True)
class WindowRow:
    """One profiling window as stored."""

    job: str
    id: str
    seq: int
    status: str
    reason: str | None
    world_size: int | None
    options: dict[str, Any]
    created_at: float
    grace_until: float
    updated_at: float
    trace_id: str | None
    summary: dict[str, Any] | None
    notes: list[str]
    ranks: list[int] = field(default_factory=list)

    @property
    def missing_ranks(self) -> list[int]:
        """Ranks of ``range(world_size)`` that never arrived ([] when the world size is unknown)."""
        if not self.world_size:
            return []
        got = set(self.ranks)
        return [r for r in range(self.world_size) if r not in got]


@dataclass(frozen=True)
class Claim:
    """A leased task or outbox row: its id, the try it is on and the lease owner."""

    id: int
    tries: int
    max_tries: int
    owner: str
    row: dict[str, Any]


@dataclass(frozen=True)
class AlertCandidate:
    """A rule that fires on a finished window for one cause (``cause`` may be a pseudo-cause such
    as ``slowdown`` or ``fidelity``). The store decides, under the quiet rules, whether it becomes
    an alert: new when not active, a reminder when active and ``reminder_s`` passed."""

    rule: str
    cause: str
    destinations: tuple[str, ...]
    reminder_s: float | None
    payload: dict[str, Any]


@dataclass(frozen=True)
class RankArrival:
    """What recording one rank's file did: ``created`` (False: the same file was there already)
    and the window afterwards (``assembled`` when this arrival completed it)."""

    created: bool
    assembled: bool
    window: WindowRow


class WindowConflict(Exception):
    """A rank upload the window can no longer take (already assembled, or another file)."""


class JobStore:
    """Jobs / windows / queue / outbox in the database of an open store (SQLite or PostgreSQL;
    the store's migrations created the tables). Every method is short (rows only, no analysis).
    """

    def __init__(self, store: Any):
        self.store = store

    def open(self) -> JobStore:
        """Nothing left to do: the store's versioned migrations own the schema."""
        return self

    @property
    def _skip_locked(self) -> str:
        return " FOR UPDATE SKIP LOCKED" if self.store.db.dialect == "postgresql" else ""

    # -- plumbing --------------------------------------------------------------------------------

    @contextmanager
    def _tx(self, key: str | None = None) -> Iterator[Any]:
        """One write transaction; ``key`` serialises the read-then-writes of one job across
        replicas (SQLite's ``BEGIN IMMEDIATE`` serialises every write anyway)."""
        with self.store.db.tx(key) as db:
            yield db

    def _read(self, sql: str, args: Sequence[Any] = ()) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self.store.db.read(sql, args)
        return rows

    def _lease_next(
        self, db: Any, table: str, *, due: str, order: str, returning: str,
        owner: str, lease_s: float, now: float,
    ) -> Any:  # fmt: skip
        """Lease the first row of ``table`` (by ``order``) that is ``due`` at ``now`` and whose lease
        is free or ran out: one statement sets ``lease_owner``, ``lease_until = now + lease_s`` and
        ``tries + 1``, so two replicas never hold one row (PostgreSQL skips rows another
        transaction has locked). ``due`` holds one ``?`` for ``now``; the row returned is
        ``(id, tries, max_tries, *returning)``, or None when nothing is due. ``table``, ``due``,
        ``order`` and ``returning`` are this module's constants, never caller input."""
        return db.execute(
            f"UPDATE {table} SET lease_owner=?, lease_until=?, tries=tries+1 WHERE id = ("
            f" SELECT id FROM {table} WHERE {due}"
            " AND (lease_until IS NULL OR lease_until < ?)"
            f" ORDER BY {order} LIMIT 1{self._skip_locked})"
            f" RETURNING id, tries, max_tries, {returning}",
            (owner, now + lease_s, now, now),
        ).fetchone()

    # -- jobs and windows ------------------------------------------------------------------------

    def add_rank(
        self,
        job: str,
        window: str,
        rank: int,
        *,
        filename: str,
        sha256: str,
        size_bytes: int,
        world_size: int | None,
        options: dict[str, Any],
        grace_s: float,
        now: float | None = None,
    ) -> RankArrival:
        """Record that ``rank``'s file of ``job/window`` is in place; create job and window on the
        first arrival. The window is assembled (status ``analysing``, an analysis task queued) in
        the same transaction once every rank of ``range(world_size)`` is there.

        Raises :class:`WindowConflict` when the window no longer receives or the rank already has
        another file; the same file again (a client retry) is ``created=False``.
        """
        now = time.time() if now is None else now
        with self._tx(key=f"job:{job}") as db:
            db.execute("INSERT OR IGNORE INTO jobs VALUES (?, ?, ?)", (job, now, now))
            db.execute("UPDATE jobs SET updated_at = ? WHERE name = ?", (now, job))
            row = db.execute(
                "SELECT status, world_size FROM windows WHERE job=? AND id=?", (job, window)
            ).fetchone()
            if row is None:
                seq = db.execute(
                    "SELECT COALESCE(MAX(seq), 0) + 1 FROM windows WHERE job=?", (job,)
                ).fetchone()[0]
                db.execute(
                    "INSERT INTO windows (job, id, seq, status, world_size, options, created_at, grace_until,"
                    " updated_at) VALUES (?, ?, ?, 'receiving', ?, ?, ?, ?, ?)",
                    (
                        job,
                        window,
                        seq,
                        world_size,
                        json.dumps(options, sort_keys=True),
                        now,
                        now + grace_s,
                        now,
                    ),
                )
                status, known_ws = "receiving", world_size
            else:
                status, known_ws = row
            have = db.execute(
                "SELECT sha256 FROM window_ranks WHERE job=? AND window=? AND rank=?", (job, window, rank)
            ).fetchone()
            if have is not None:
                if have[0] != sha256:
                    raise WindowConflict(
                        f"rank {rank} of window {window!r} of job {job!r} already has another file"
                    )
                created = False
            elif status != "receiving":
                raise WindowConflict(
                    f"window {window!r} of job {job!r} is {status}: it was assembled without rank {rank}; "
                    "send later profiling sessions under a new window id"
                )
            else:
                db.execute(
                    "INSERT INTO window_ranks VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (job, window, rank, filename, sha256, size_bytes, now),
                )
                created = True
            if known_ws is None and world_size:
                known_ws = world_size
                db.execute("UPDATE windows SET world_size=? WHERE job=? AND id=?", (world_size, job, window))
            assembled = False
            if created and known_ws:
                n = db.execute(
                    "SELECT COUNT(*) FROM window_ranks WHERE job=? AND window=? AND rank < ?",
                    (job, window, known_ws),
                ).fetchone()[0]
                if n >= known_ws:
                    assembled = self._assemble(db, job, window, now)
            db.execute("UPDATE windows SET updated_at=? WHERE job=? AND id=?", (now, job, window))
        got = self.window(job, window)
        assert got is not None
        return RankArrival(created, assembled, got)

    @staticmethod
    def _assemble(db: Any, job: str, window: str, now: float, max_tries: int = 3) -> bool:
        cur = db.execute(
            "UPDATE windows SET status='analysing', updated_at=? WHERE job=? AND id=? AND status='receiving'",
            (now, job, window),
        )
        if cur.rowcount != 1:
            return False
        db.execute(
            "INSERT OR IGNORE INTO tasks (kind, job, window, state, max_tries, not_before, created_at)"
            " VALUES ('analyse', ?, ?, 'queued', ?, ?, ?)",
            (job, window, max_tries, now, now),
        )
        return True

    def assemble_overdue(self, now: float | None = None) -> list[tuple[str, str]]:
        """Assemble every window still receiving after its grace deadline (the analysis then
        names the missing ranks); the (job, window) pairs this call assembled."""
        now = time.time() if now is None else now
        done: list[tuple[str, str]] = []
        # a plain read first: the loop polls often, and most polls find nothing to assemble
        if not self._read(
            "SELECT 1 AS x FROM windows WHERE status='receiving' AND grace_until <= ? LIMIT 1", (now,)
        ):
            return done
        with self._tx() as db:
            due = db.execute(
                "SELECT job, id FROM windows WHERE status='receiving' AND grace_until <= ?", (now,)
            ).fetchall()
            for job, window in due:
                if self._assemble(db, job, window, now):
                    done.append((job, window))
        return done

    def window(self, job: str, window: str) -> WindowRow | None:
        rows = self._read("SELECT * FROM windows WHERE job=? AND id=?", (job, window))
        if not rows:
            return None
        ranks = [
            r["rank"]
            for r in self._read(
                "SELECT rank FROM window_ranks WHERE job=? AND window=? ORDER BY rank", (job, window)
            )
        ]
        return _window(rows[0], ranks)

    def rank_rows(self, job: str, window: str) -> list[dict[str, Any]]:
        """A window's arrived ranks, by rank: rank, filename, sha256, size_bytes, received_at."""
        return self._read("SELECT * FROM window_ranks WHERE job=? AND window=? ORDER BY rank", (job, window))

    def rank_files(self, job: str, window: str) -> list[tuple[int, str]]:
        """(rank, stored file name) of a window's arrived ranks, by rank."""
        return [
            (r["rank"], r["filename"])
            for r in self._read(
                "SELECT rank, filename FROM window_ranks WHERE job=? AND window=? ORDER BY rank",
                (job, window),
            )
        ]

    def _ranks_of(self, job: str, ids: list[str]) -> dict[str, list[int]]:
        got: dict[str, list[int]] = {i: [] for i in ids}
        if ids:
            marks = ", ".join("?" for _ in ids)
            for r in self._read(
                f"SELECT window, rank FROM window_ranks WHERE job=? AND window IN ({marks}) ORDER BY rank",
                (job, *ids),
            ):
                got[r["window"]].append(int(r["rank"]))
        return got

    def windows(self, job: str, limit: int, offset: int = 0) -> tuple[int, list[WindowRow]]:
        """(total, newest-first page) of a job's windows with the ranks that arrived."""
        total = self._read("SELECT COUNT(*) AS n FROM windows WHERE job=?", (job,))[0]["n"]
        rows = self._read(
            "SELECT * FROM windows WHERE job=? ORDER BY seq DESC LIMIT ? OFFSET ?", (job, limit, offset)
        )
        ranks = self._ranks_of(job, [r["id"] for r in rows])
        return int(total), [_window(r, ranks[r["id"]]) for r in rows]

    def jobs(
        self, limit: int, offset: int = 0, pattern: str | None = None
    ) -> tuple[int, list[dict[str, Any]]]:
        """(total, most recently updated first page) of jobs with their window counts and the
        latest window's id, status and summary. ``pattern`` is a SQL GLOB on the name."""
        where, args = ("", [])
        if pattern and self.store.db.dialect == "postgresql":
            where, args = ("WHERE j.name LIKE ? ESCAPE '!'", [_glob_to_like(pattern)])
        elif pattern:
            where, args = ("WHERE j.name GLOB ?", [pattern])
        total = self._read(f"SELECT COUNT(*) AS n FROM jobs j {where}", args)[0]["n"]
        rows = self._read(
            f"SELECT j.name, j.created_at, j.updated_at,"
            f" (SELECT COUNT(*) FROM windows w WHERE w.job=j.name) AS n_windows"
            f" FROM jobs j {where} ORDER BY j.updated_at DESC, j.name LIMIT ? OFFSET ?",
            [*args, limit, offset],
        )
        for r in rows:
            last = self._read("SELECT * FROM windows WHERE job=? ORDER BY seq DESC LIMIT 1", (r["name"],))
            r["latest"] = (
                _window(last[0], self._ranks_of(r["name"], [last[0]["id"]])[last[0]["id"]]) if last else None
            )
        return int(total), rows

    def has_job(self, job: str) -> bool:
        return bool(self._read("SELECT 1 AS x FROM jobs WHERE name=?", (job,)))

    # -- analysis queue --------------------------------------------------------------------------

    def claim_task(self, owner: str, lease_s: float, now: float | None = None) -> Claim | None:
        """Lease the oldest due analysis task: queued, ``not_before`` passed, no live lease."""
        now = time.time() if now is None else now
        with self._tx() as db:
            row = self._lease_next(
                db, "tasks", due="state='queued' AND not_before <= ?", order="id",
                returning="kind, job, window", owner=owner, lease_s=lease_s, now=now,
            )  # fmt: skip
        if row is None:
            return None
        tid, tries, max_tries, kind, job, window = row
        return Claim(
            int(tid), int(tries), int(max_tries), owner, {"kind": kind, "job": job, "window": window}
        )

    def renew_task(self, claim: Claim, lease_s: float, now: float | None = None) -> bool:
        """Extend a held lease (False: it was lost, another worker may have the task now)."""
        now = time.time() if now is None else now
        with self._tx() as db:
            cur = db.execute(
                "UPDATE tasks SET lease_until=? WHERE id=? AND lease_owner=? AND state='queued'",
                (now + lease_s, claim.id, claim.owner),
            )
            return cur.rowcount == 1

    def retry_task(self, claim: Claim, error: str, delay_s: float, now: float | None = None) -> bool:
        """Give a failed try back to the queue after ``delay_s``; when the tries are used up, fail
        the task and its window instead. True when it will run again."""
        now = time.time() if now is None else now
        with self._tx() as db:
            if claim.tries >= claim.max_tries:
                self._fail(db, claim, f"analysis failed {claim.tries} times; last error: {error}", now)
                return False
            db.execute(
                "UPDATE tasks SET lease_owner=NULL, lease_until=NULL, not_before=?, error=?"
                " WHERE id=? AND lease_owner=?",
                (now + delay_s, error, claim.id, claim.owner),
            )
            return True

    def fail_task(self, claim: Claim, reason: str, now: float | None = None) -> None:
        """Fail the task and its window for good (the input cannot be analysed)."""
        now = time.time() if now is None else now
        with self._tx() as db:
            self._fail(db, claim, reason, now)

    @staticmethod
    def _fail(db: Any, claim: Claim, reason: str, now: float) -> None:
        db.execute(
            "UPDATE tasks SET state='failed', finished_at=?, error=?, lease_owner=NULL WHERE id=?",
            (now, reason, claim.id),
        )
        db.execute(
            "UPDATE windows SET status='failed', reason=?, updated_at=?"
            " WHERE job=? AND id=? AND status='analysing'",
            (reason, now, claim.row["job"], claim.row["window"]),
        )

    def finish_task(
        self,
        claim: Claim,
        *,
        trace_id: str,
        summary: dict[str, Any],
        notes: list[str],
        candidates: Sequence[AlertCandidate] = (),
        rules_evaluated: Sequence[str] = (),
        max_tries: int = 8,
        now: float | None = None,
    ) -> list[str]:
        """Mark the window done with its trace and summary and raise its alerts, all in one
        transaction (a crash between analysis and delivery loses nothing: the outbox rows exist
        exactly when the window is done). Quiet rules: a candidate whose (rule, job, cause) is
        active becomes a reminder only once ``reminder_s`` passed since it was last sent; an
        active state of an evaluated rule without a candidate now is cleared. Returns the ids of
        the alerts raised ([] also when the window was already finished by another worker)."""
        now = time.time() if now is None else now
        job, window = claim.row["job"], claim.row["window"]
        raised: list[str] = []
        with self._tx(key=f"job:{job}") as db:
            cur = db.execute(
                "UPDATE windows SET status='done', reason=NULL, trace_id=?, summary=?, notes=?, updated_at=?"
                " WHERE job=? AND id=? AND status='analysing'",
                (trace_id, json.dumps(summary), json.dumps(notes), now, job, window),
            )
            db.execute(
                "UPDATE tasks SET state='done', finished_at=?, lease_owner=NULL, error=NULL WHERE id=?",
                (now, claim.id),
            )
            if cur.rowcount != 1:
                return []
            firing = {(c.rule, c.cause) for c in candidates}
            for rule in rules_evaluated:
                for (cause,) in db.execute(
                    "SELECT cause FROM alert_state WHERE rule=? AND job=? AND active=1", (rule, job)
                ).fetchall():
                    if (rule, cause) not in firing:
                        db.execute(
                            "UPDATE alert_state SET active=0 WHERE rule=? AND job=? AND cause=?",
                            (rule, job, cause),
                        )
            for c in candidates:
                state = db.execute(
                    "SELECT active, last_sent_at FROM alert_state WHERE rule=? AND job=? AND cause=?",
                    (c.rule, job, c.cause),
                ).fetchone()
                if state is not None and state[0]:
                    if c.reminder_s is None or now - float(state[1]) < c.reminder_s:
                        continue
                    kind = "reminder"
                else:
                    kind = "new"
                alert_id = secrets.token_hex(8)
                payload = {**c.payload, "alert_id": alert_id, "kind": kind, "rule": c.rule}
                db.execute(
                    "INSERT INTO alerts VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (alert_id, c.rule, job, window, c.cause, kind, now, json.dumps(payload)),
                )
                db.execute(
                    "INSERT INTO alert_state VALUES (?, ?, ?, 1, ?, ?, ?)"
                    " ON CONFLICT (rule, job, cause) DO UPDATE SET active=1,"
                    " last_sent_at=excluded.last_sent_at,"
                    " last_window=excluded.last_window",
                    (c.rule, job, c.cause, now, now, window),
                )
                for dest in c.destinations:
                    db.execute(
                        "INSERT INTO outbox (alert_id, destination, state, max_tries, next_at, created_at)"
                        " VALUES (?, ?, 'pending', ?, ?, ?)",
                        (alert_id, dest, max_tries, now, now),
                    )
                raised.append(alert_id)
        return raised

    # -- alert outbox ----------------------------------------------------------------------------

    def claim_delivery(self, owner: str, lease_s: float, now: float | None = None) -> Claim | None:
        """Lease the most overdue pending outbox row and open its delivery-log entry."""
        now = time.time() if now is None else now
        with self._tx() as db:
            row = self._lease_next(
                db, "outbox", due="state='pending' AND next_at <= ?", order="next_at, id",
                returning="alert_id, destination", owner=owner, lease_s=lease_s, now=now,
            )  # fmt: skip
            if row is None:
                return None
            oid, tries, max_tries, alert_id, destination = row
            payload = db.execute("SELECT payload FROM alerts WHERE id=?", (alert_id,)).fetchone()[0]
            db.execute(
                "INSERT INTO deliveries (outbox_id, try, owner, started_at) VALUES (?, ?, ?, ?)",
                (oid, tries, owner, now),
            )
        return Claim(
            int(oid),
            int(tries),
            int(max_tries),
            owner,
            {"alert_id": alert_id, "destination": destination, "payload": json.loads(payload)},
        )

    def record_delivery(
        self,
        claim: Claim,
        *,
        ok: bool,
        status: int | None,
        error: str | None,
        retry_delay_s: float,
        now: float | None = None,
    ) -> str:
        """Close the try's log entry and move the row on: ``delivered``; ``pending`` again after
        ``retry_delay_s``; or ``dead`` once ``max_tries`` are used. Returns the new state (or
        ``lost`` when the lease had run out and another worker owns the row now)."""
        now = time.time() if now is None else now
        with self._tx() as db:
            db.execute(
                "UPDATE deliveries SET finished_at=?, status=?, error=?"
                " WHERE outbox_id=? AND try=? AND owner=?",
                (now, status, error, claim.id, claim.tries, claim.owner),
            )
            args: list[Any]
            if ok:
                state = "delivered"
                sets, args = "delivered_at=?, last_error=NULL", [now]
            elif claim.tries >= claim.max_tries:
                state = "dead"
                sets, args = "last_error=?", [error]
            else:
                state = "pending"
                sets, args = "next_at=?, last_error=?", [now + retry_delay_s, error]
            cur = db.execute(
                f"UPDATE outbox SET state=?, lease_owner=NULL, lease_until=NULL, {sets}"
                " WHERE id=? AND lease_owner=? AND state='pending'",
                [state, *args, claim.id, claim.owner],
            )
            return state if cur.rowcount == 1 else "lost"

    def alerts(self, job: str | None, limit: int, offset: int = 0) -> tuple[int, list[dict[str, Any]]]:
        """(total, newest first) alerts, with each destination's state and tries."""
        where, args = ("WHERE job=?", [job]) if job else ("", [])
        total = self._read(f"SELECT COUNT(*) AS n FROM alerts {where}", args)[0]["n"]
        rows = self._read(
            f"SELECT * FROM alerts {where} ORDER BY created_at DESC, id LIMIT ? OFFSET ?",
            [*args, limit, offset],
        )
        for r in rows:
            r["payload"] = json.loads(r["payload"])
            r["outbox"] = self._read(
                "SELECT id, destination, state, tries, max_tries, next_at, delivered_at, last_error"
                " FROM outbox WHERE alert_id=? ORDER BY id",
                (r["id"],),
            )
        return int(total), rows

    def alert(self, alert_id: str) -> dict[str, Any] | None:
        """One alert with its outbox rows and the delivery log of each (every try, in order)."""
        rows = self._read("SELECT * FROM alerts WHERE id=?", (alert_id,))
        if not rows:
            return None
        a = rows[0]
        a["payload"] = json.loads(a["payload"])
        a["outbox"] = self._read(
            "SELECT id, destination, state, tries, max_tries, next_at, delivered_at, last_error"
            " FROM outbox WHERE alert_id=? ORDER BY id",
            (alert_id,),
        )
        for o in a["outbox"]:
            o["log"] = self._read(
                "SELECT try, owner, started_at, finished_at, status, error FROM deliveries"
                " WHERE outbox_id=? ORDER BY try",
                (o["id"],),
            )
        return a

    def counts(self) -> dict[str, int]:
        """Rows per window status and per outbox state (for /healthz and tests)."""
        out: dict[str, int] = {}
        for r in self._read("SELECT status AS k, COUNT(*) AS n FROM windows GROUP BY status"):
            out[f"windows_{r['k']}"] = int(r["n"])
        for r in self._read("SELECT state AS k, COUNT(*) AS n FROM outbox GROUP BY state"):
            out[f"outbox_{r['k']}"] = int(r["n"])
        return out


def _glob_to_like(pattern: str) -> str:
    """A GLOB pattern (``*``, ``?``) as LIKE with ``!`` escaping (character classes stay literal)."""
    out = []
    for ch in pattern:
        if ch in "%_!":
            out.append("!" + ch)
        elif ch == "*":
            out.append("%")
        elif ch == "?":
            out.append("_")
        else:
            out.append(ch)
    return "".join(out)


def _window(row: dict[str, Any], ranks: list[int]) -> WindowRow:
    return WindowRow(
        job=row["job"],
        id=row["id"],
        seq=int(row["seq"]),
        status=row["status"],
        reason=row["reason"],
        world_size=row["world_size"],
        options=json.loads(row["options"]),
        created_at=float(row["created_at"]),
        grace_until=float(row["grace_until"]),
        updated_at=float(row["updated_at"]),
        trace_id=row["trace_id"],
        summary=json.loads(row["summary"]) if row["summary"] else None,
        notes=json.loads(row["notes"]),
        ranks=ranks,
    )
