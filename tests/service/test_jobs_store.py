"""Jobs, windows, the analysis queue and the alert outbox on a real SQLite store and on a real
PostgreSQL one (a throwaway server, ``tests/conftest.py``)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.core.jobs_store import AlertCandidate, JobStore, WindowConflict, backoff_delay
from server.core.store import PostgresStore, Store


@pytest.fixture(params=["sqlite", "postgresql"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[JobStore, JobStore]]:
    """Two stores on one data folder: two connections, as two replicas would have."""
    if request.param == "sqlite":
        a, b = Store(tmp_path).open(), Store(tmp_path).open()
    else:
        dsn = request.getfixturevalue("pg_dsn")
        a = PostgresStore(tmp_path, dsn, replica="a").open()
        b = PostgresStore(tmp_path, dsn, replica="b").open()
    try:
        yield JobStore(a).open(), JobStore(b).open()
    finally:
        a.close()
        b.close()


def arrive(
    js: JobStore,
    rank: int,
    window: str = "w1",
    ws: int | None = 2,
    now: float = 100.0,
    sha: str | None = None,
):
    return js.add_rank(
        "job",
        window,
        rank,
        filename=f"rank{rank}_t.json",
        sha256=sha or f"h{rank}",
        size_bytes=10,
        world_size=ws,
        options={},
        grace_s=30.0,
        now=now,
    )


def test_a_window_assembles_when_its_last_rank_arrives_on_another_replica(stores) -> None:
    a, b = stores
    first = arrive(a, 0)
    assert (first.created, first.assembled, first.window.status) == (True, False, "receiving")
    assert first.window.missing_ranks == [1]
    again = arrive(b, 0)  # a client retry of the same file
    assert not again.created and not again.assembled
    last = arrive(b, 1)
    assert last.assembled and last.window.status == "analysing" and last.window.missing_ranks == []
    claim = a.claim_task("A", lease_s=10, now=101)
    assert claim is not None and claim.row == {"kind": "analyse", "job": "job", "window": "w1"}
    assert b.claim_task("B", lease_s=10, now=102) is None  # leased: nobody else gets it
    with pytest.raises(WindowConflict, match="already has another file"):
        arrive(a, 1, sha="other")
    with pytest.raises(WindowConflict, match="is analysing"):
        arrive(a, 2, ws=3)


def test_grace_period_assembles_once_and_a_dead_workers_lease_runs_out(stores) -> None:
    a, b = stores
    arrive(a, 0, ws=4, now=100)
    assert a.assemble_overdue(now=129) == []
    assert a.assemble_overdue(now=131) == [("job", "w1")]
    assert b.assemble_overdue(now=132) == []
    w = a.window("job", "w1")
    assert w is not None and w.status == "analysing" and w.missing_ranks == [1, 2, 3]
    dead = a.claim_task("A", lease_s=10, now=140)
    assert dead is not None and dead.tries == 1
    assert b.claim_task("B", lease_s=10, now=149) is None
    took = b.claim_task("B", lease_s=10, now=151)  # A never renewed: its lease ran out
    assert took is not None and took.tries == 2 and took.id == dead.id
    assert not a.renew_task(dead, 10, now=152) and b.renew_task(took, 10, now=152)
    assert a.finish_task(dead, trace_id="t", summary={}, notes=[], now=153) == []  # the first finisher wins
    w = b.window("job", "w1")
    assert w is not None and w.status == "done"
    assert b.finish_task(took, trace_id="t", summary={}, notes=[], now=154) == []  # finished once only


def test_retries_are_bounded_and_then_fail_the_window(stores) -> None:
    a, _ = stores
    arrive(a, 0, ws=1)
    for i in range(3):
        c = a.claim_task("A", 10, now=200 + 10 * i)
        assert c is not None
        again = a.retry_task(c, "boom", delay_s=5, now=201 + 10 * i)
        assert again == (i < 2)
    w = a.window("job", "w1")
    assert w is not None and w.status == "failed" and "failed 3 times; last error: boom" in (w.reason or "")
    assert a.claim_task("A", 10, now=999) is None


def candidate(cause: str, reminder: float | None = None) -> AlertCandidate:
    return AlertCandidate("r1", cause, ("hook",), reminder, {"summary": cause})


def finish(
    js: JobStore, window: str, causes: list[str], now: float, reminder: float | None = None
) -> list[str]:
    arrive(js, 0, window=window, ws=1, now=now)
    c = js.claim_task("A", 10, now=now)
    assert c is not None
    return js.finish_task(
        c,
        trace_id="t",
        summary={},
        notes=[],
        now=now,
        rules_evaluated=["r1"],
        candidates=[candidate(x, reminder) for x in causes],
    )


def test_quiet_rules_one_alert_per_cause_until_it_clears(stores) -> None:
    a, _ = stores
    assert len(finish(a, "w1", ["faulty-machine", "gc-pause"], now=100, reminder=1000)) == 2
    assert finish(a, "w2", ["faulty-machine", "gc-pause"], now=200, reminder=1000) == []
    assert finish(a, "w3", ["faulty-machine"], now=300, reminder=1000) == []  # gc-pause cleared
    assert len(finish(a, "w4", ["faulty-machine", "gc-pause"], now=400, reminder=1000)) == 1  # gc back
    (reminder,) = finish(a, "w5", ["faulty-machine", "gc-pause"], now=1101, reminder=1000)
    got = a.alert(reminder)
    assert got is not None and got["kind"] == "reminder" and got["cause"] == "faulty-machine"
    total, _ = a.alerts("job", 50)
    assert total == 4


def test_outbox_retries_with_backoff_then_delivers_or_dies(stores) -> None:
    a, b = stores
    (alert_id,) = finish(a, "w1", ["faulty-machine"], now=100)
    c1 = a.claim_delivery("A", 5, now=100)
    assert c1 is not None and c1.row["payload"]["alert_id"] == alert_id
    assert b.claim_delivery("B", 5, now=101) is None
    assert (
        a.record_delivery(c1, ok=False, status=500, error="HTTP 500", retry_delay_s=2, now=101) == "pending"
    )
    assert b.claim_delivery("B", 5, now=102) is None  # not due yet
    c2 = b.claim_delivery("B", 5, now=103.5)
    assert c2 is not None and c2.tries == 2
    # B dies holding the lease; A takes over once it ran out and delivers
    c3 = a.claim_delivery("A", 5, now=109)
    assert c3 is not None and c3.tries == 3
    assert b.record_delivery(c2, ok=True, status=200, error=None, retry_delay_s=0, now=109.5) == "lost"
    assert a.record_delivery(c3, ok=True, status=200, error=None, retry_delay_s=0, now=110) == "delivered"
    got = a.alert(alert_id)
    assert got is not None
    (row,) = got["outbox"]
    assert row["state"] == "delivered" and [t["try"] for t in row["log"]] == [1, 2, 3]
    assert [t["status"] for t in row["log"]] == [500, 200, 200]  # the late answer is logged too
    assert a.claim_delivery("A", 5, now=10_000) is None


def test_backoff_doubles_within_jitter_and_caps() -> None:
    rng = random.Random(1)
    for tries, base in ((1, 1.0), (2, 2.0), (3, 4.0), (10, 30.0)):
        d = backoff_delay(tries, 1.0, 30.0, rng)
        assert 0.5 * base <= d < 1.5 * base


def test_listings_carry_the_ranks_that_arrived(stores) -> None:
    a, _ = stores
    arrive(a, 0, ws=3)
    arrive(a, 2, ws=3)
    _, (w,) = a.windows("job", 10)
    assert w.ranks == [0, 2] and w.missing_ranks == [1]
    _, (j,) = a.jobs(10)
    assert j["latest"].ranks == [0, 2]
