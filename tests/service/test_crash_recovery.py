"""kill -9 of the server while a receiver holds the first alert delivery open, then a restart:
every alert still ends delivered exactly once (the lease runs out, the new process sends it)."""

from __future__ import annotations

import os
import signal
import subprocess
from collections import Counter
from pathlib import Path

import httpx
from loopback import Receiver, Script, wait_for
from test_alerts_live import hook_rules
from test_windows_live import EXAMPLES, send_windows

from bench.serve_process import free_port, start_serve


def serve(data: Path, rules: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    args = ["--data-dir", str(data), "--alerts", str(rules), "--lease", "5", "--poll", "0.1"]
    return start_serve(port, log, *args, timeout=60)


def test_kill_9_during_delivery_then_restart_delivers_exactly_once(tmp_path: Path) -> None:
    with Receiver(Script(hold=1, statuses=[200])) as hook:
        rules = tmp_path / "alerts.yaml"
        rules.write_text(hook_rules(hook.url, "slow", 1.1))
        data, log = tmp_path / "data", tmp_path / "server.log"
        port = free_port()
        first = serve(data, rules, port, log)
        try:
            url = f"http://127.0.0.1:{port}"
            send_windows(url, "job-k9", "w1", EXAMPLES / "slow-rank" / "traces", [0, 1, 2, 3], tmp_path)
            hook.wait_for(1, timeout=120)  # the first delivery is in flight, held open
            os.kill(first.pid, signal.SIGKILL)
            first.wait(10)
        finally:
            if first.poll() is None:
                first.kill()
        second = serve(data, rules, port, log)
        try:
            alerts = httpx.get(f"{url}/api/alerts").json()
            n = alerts["total"]
            assert n >= 1
            wait_for(lambda: sum(1 for _, st in hook.answered if st == 200) >= n, 60)
            wait_for(
                lambda: all(
                    o["state"] == "delivered"
                    for a in httpx.get(f"{url}/api/alerts").json()["alerts"]
                    for o in a["outbox"]
                ),
                30,
            )
            first_id = hook.requests[0].headers["x-lens-alert-id"]
            detail = httpx.get(f"{url}/api/alerts/{first_id}").json()
        finally:
            second.send_signal(signal.SIGTERM)
            second.wait(20)
        hook.release()
    delivered = Counter(r.headers["x-lens-alert-id"] for r, st in hook.answered if st == 200)
    assert len(delivered) == n and set(delivered.values()) == {1}, delivered
    (row,) = detail["outbox"]
    tries = row["log"]
    assert [t["try"] for t in tries] == [1, 2] and tries[0]["finished_at"] is None  # the killed try
    assert tries[1]["status"] == 200 and tries[0]["owner"] != tries[1]["owner"]
