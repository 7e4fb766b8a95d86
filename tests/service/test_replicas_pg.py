"""Two server processes on one PostgreSQL store (a real throwaway server, loopback only).

Both take concurrent trace uploads and the ranks of live windows (each window's ranks split
across the two), analyse and alert. Replica A is killed with -9 while it holds an analysis
lease; B finishes that claim once the lease ran out. At the end nothing is lost (every upload
stored once, every window done), nothing is analysed or alerted twice (one trace row per content,
one alert per window, each delivered), and the killed replica's staging folder is left to it.
Bounded: 4 windows of 4 ranks, 8 uploads, a 5 s lease, every wait capped.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
from loopback import Receiver, Script, wait_for
from test_alerts_live import hook_rules
from test_windows_live import EXAMPLES

from bench.serve_process import free_port, start_serve
from server.ingest_client import LensReporter

psycopg = pytest.importorskip("psycopg")

LEASE_S = 5.0
SCENARIOS = ["slow-rank", "stage-imbalance", "gc-pause", "baseline"]

pytestmark = pytest.mark.slow


def serve(dsn: str, data: Path, replica: str, rules: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    args = ["--data-dir", str(data), "--database", dsn, "--replica-id", replica, "--alerts", str(rules),
            "--lease", str(LEASE_S), "--grace", "60", "--poll", "0.1", "--workers", "0"]  # fmt: skip
    return start_serve(port, log, *args, timeout=90)


def send_window(urls: list[str], job: str, folder: Path, tmp: Path) -> None:
    """Rank r of a 4-rank window streams to replica r % 2, all ranks at once; a rank whose
    replica went away is sent again to the other one (what a load balancer does)."""

    def send(url: str, r: int) -> LensReporter:
        rep = LensReporter(url, job, rank=r, world_size=4, out_dir=tmp, attempt_timeout=10,
                           total_timeout=6, max_tries=3, backoff=0.2)  # fmt: skip
        rep.submit(folder / f"kineto_rank{r}.json.gz", "w1")
        return rep

    reps = [send(urls[r % 2], r) for r in range(4)]
    for r, rep in enumerate(reps):
        assert rep.close(60)
        if not all(o.ok for o in rep.outcomes):
            again = send(urls[(r + 1) % 2], r)
            assert again.close(60) and all(o.ok for o in again.outcomes), again.outcomes


def native_trace(i: int) -> bytes:
    """A tiny native JSON Lines trace (1 worker, 2 steps); ``i`` sets its content."""
    header = {
        "format": "straggler-lens/native",
        "version": 1,
        "job": {"dp_size": 1, "pp_size": 1, "trial_name": f"t{i}"},
    }
    ops = [
        {"dp_rank": 0, "stage": 0, "rank": 0, "step": step, "optype": optype, "start_ts": start,
         "duration": dur, "seq_id": 0, "mc": 0, "gmc": 0, "mb_id": 0}
        for step in range(2)
        for optype, start, dur in (("forward-compute", 0.0, 0.010), ("backward-compute", 0.011, 0.020))
    ]  # fmt: skip
    return ("\n".join(json.dumps(x) for x in [header, *ops]) + "\n").encode()


def upload(urls: list[str], first: int, i: int) -> str:
    """Upload trace ``i`` as a raw body to replica ``first``, to the other when that one is gone."""
    body, params = native_trace(i), {"filename": f"t{i}.jsonl"}
    try:
        r = httpx.post(f"{urls[first]}/api/traces", content=body, params=params, timeout=60)
    except httpx.TransportError:
        r = httpx.post(f"{urls[1 - first]}/api/traces", content=body, params=params, timeout=60)
    assert r.status_code in (200, 201), r.text
    return str(r.json()["trace_id"])


def rows(dsn: str, sql: str) -> list[tuple]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return list(conn.execute(sql).fetchall())


def test_two_replicas_one_postgres_store_kill_9_loses_and_repeats_nothing(
    tmp_path: Path, pg_dsn: str
) -> None:
    data = tmp_path / "shared"
    with Receiver(Script(statuses=[200])) as hook:
        rules = tmp_path / "alerts.yaml"
        rules.write_text(hook_rules(hook.url, "any", 1.0))
        ports = [free_port(), free_port()]
        urls = [f"http://127.0.0.1:{p}" for p in ports]
        a = serve(pg_dsn, data, "a", rules, ports[0], tmp_path / "a.log")
        b = None
        try:
            b = serve(pg_dsn, data, "b", rules, ports[1], tmp_path / "b.log")
            # concurrent work on both: windows (ranks split across replicas) and plain uploads,
            # each upload content sent to both replicas at once
            errors: list[BaseException] = []
            ids: dict[int, set[str]] = {}

            def guarded(fn, *args) -> None:  # type: ignore[no-untyped-def]
                try:
                    fn(*args)
                except BaseException as exc:  # reported by the main thread
                    errors.append(exc)

            def uploads(i: int) -> None:
                ids.setdefault(i, set()).add(upload(urls, i % 2, i))
                ids[i].add(upload(urls, (i + 1) % 2, i))

            windows = [
                (send_window, urls, f"job-{s}", EXAMPLES / s / "traces", tmp_path / s) for s in SCENARIOS
            ]
            threads = [threading.Thread(target=guarded, args=w) for w in windows]
            threads += [threading.Thread(target=guarded, args=(uploads, i)) for i in range(4)]
            for t in threads:
                t.start()
            # kill A while it holds an analysis lease
            leased_by_a = (
                "SELECT id, lease_until FROM tasks WHERE state='queued'"
                f" AND lease_owner LIKE 'a:%' AND lease_until > {time.time()}"
            )
            held = wait_for(lambda: rows(pg_dsn, leased_by_a), 90, every=0.02)
            os.kill(a.pid, signal.SIGKILL)
            a.wait(10)
            killed_at = time.time()
            for t in threads:
                t.join(120)
            assert not errors, errors
            # B alone finishes: every window done, A's held task after its lease ran out
            n_done = "SELECT COUNT(*) FROM windows WHERE status='done'"
            wait_for(lambda: rows(pg_dsn, n_done)[0][0] == len(SCENARIOS), 120)
            wait_for(lambda: not rows(pg_dsn, "SELECT id FROM outbox WHERE state <> 'delivered'"), 60)
        finally:
            for p in (a, b):
                if p is not None and p.poll() is None:
                    p.send_signal(signal.SIGTERM)
                    p.wait(20)
    # nothing lost: every upload stored once, both replicas answered the same id for one content
    assert all(len(v) == 1 for v in ids.values()), ids
    traces = rows(pg_dsn, "SELECT content_hash FROM traces")
    assert len(traces) == len({h for (h,) in traces}) == len(SCENARIOS) + len(ids)
    # every window done, each once: one done task per window, A's held claim finished by B late
    tasks = rows(pg_dsn, "SELECT id, state, tries, finished_at FROM tasks")
    assert len(tasks) == len(SCENARIOS) and {t[1] for t in tasks} == {"done"}
    (held_id, held_until), *_ = held
    (late,) = [t for t in tasks if t[0] == held_id]
    assert late[2] >= 2 and late[3] >= held_until, "B re-claimed A's task only after the lease"
    assert late[3] >= killed_at
    # alerted once per window and rule, each alert delivered with one successful request
    alerts = rows(pg_dsn, 'SELECT id, job, "window", rule, cause FROM alerts')
    per_window = Counter((j, w, r, c) for _, j, w, r, c in alerts)
    assert alerts and set(per_window.values()) == {1}, per_window
    delivered = Counter(rq.headers["x-lens-alert-id"] for rq, st in hook.answered if st == 200)
    assert set(delivered) == {i for (i, *_) in alerts}
    unfinished = (
        "SELECT o.alert_id FROM deliveries d JOIN outbox o ON o.id = d.outbox_id WHERE d.finished_at IS NULL"
    )
    killed_tries = {i for (i,) in rows(pg_dsn, unfinished)}
    # a second request only where A died inside a delivery try (the receiver dedups by alert id)
    assert all(n == 1 or i in killed_tries for i, n in delivered.items()), delivered
    # each replica staged in its own folder; B never cleaned A's
    assert sorted(p.name for p in (data / "tmp").iterdir()) == ["a", "b"]
