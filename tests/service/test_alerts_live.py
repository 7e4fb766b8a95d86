"""Alerts end to end: a slow-rank job raises one alert per cause, signed, delivered to a real
loopback receiver after it failed twice; later windows with the same causes stay quiet."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections import Counter
from pathlib import Path

import anyio
import httpx
from loopback import LiveServer, Receiver, Script, server_tests_module, wait_for
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from test_windows_live import EXAMPLES, send_windows

from server.core.alert_rules import parse_rules
from server.core.settings import Settings

SECRET = "alert-secret-0123456789abcdef"
over_budget = server_tests_module("budget_calls").over_budget


def rules_yaml(hook: str, slack: str) -> str:
    return f"""\
destinations:
  hook:
    type: webhook
    url: {hook}/hook
    secret: {SECRET}
  chat:
    type: slack
    url: {slack}/slack
rules:
  - name: slow-jobs
    jobs: ["llama-*"]
    when:
      slowdown_above: 1.1
    to: [hook, chat]
delivery:
  max_tries: 5
  backoff: 200ms
  timeout: 5s
"""


def hook_rules(hook: str, rule: str, slowdown_above: float) -> str:
    """One rule ``rule`` sending every window slower than ``slowdown_above`` to the signed webhook
    ``{hook}/hook`` (5 tries, 200 ms back-off, 2 s timeout): the kill -9 and replica tests' rules."""
    return f"""\
destinations:
  hook: {{type: webhook, url: "{hook}/hook", secret: {SECRET}}}
rules:
  - name: {rule}
    when: {{slowdown_above: {slowdown_above}}}
    to: [hook]
delivery: {{max_tries: 5, backoff: 200ms, timeout: 2s}}
"""


def verified(body: bytes, headers: dict[str, str]) -> bool:
    """The receiver's own check of the documented scheme (not the server's code)."""
    ts = headers["x-lens-timestamp"]
    want = "v1=" + hmac.new(SECRET.encode(), ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(want, headers["x-lens-signature"]) and abs(time.time() - int(ts)) < 300


async def monitoring_answers_over_budget(url: str, alert_id: str) -> list[str]:
    """The monitoring tools' answers on a job with two windows and its alerts, against the
    documented budgets (docs/SERVER.md, tests/server/budget_calls.py)."""
    job = {"job": "llama-run7"}
    async with Client(streamable_http_client(url)) as c:
        found = [
            over_budget("list_jobs", await c.call_tool("list_jobs", {})),
            over_budget("get_job", await c.call_tool("get_job", job)),
            over_budget("get_window", await c.call_tool("get_window", {**job, "window": "w1"})),
            over_budget(
                "compare_windows",
                await c.call_tool("compare_windows", {**job, "before": "w1", "after": "w2"}),
            ),
            over_budget("list_alerts", await c.call_tool("list_alerts", {})),
            over_budget("get_alert", await c.call_tool("get_alert", {"alert_id": alert_id})),
        ]
    return [p for p in found if p]


def test_one_alert_per_cause_signed_and_delivered_after_two_failures(tmp_path: Path) -> None:
    hook_script = Script(fail_first=2, key_header="x-lens-alert-id")
    with Receiver(hook_script) as hook, Receiver(Script(statuses=[200])) as slack:
        rules = parse_rules(rules_yaml(hook.url, slack.url), "alerts.yaml")
        settings = Settings(
            data_dir=tmp_path / "data",
            alerts=rules,
            poll_s=0.1,
            lease_s=20,
            public_url="https://lens.example",
        )
        with LiveServer(settings) as lens:
            send_windows(
                lens.url, "llama-run7", "w1", EXAMPLES / "slow-rank" / "traces", [0, 1, 2, 3], tmp_path
            )
            w1 = wait_for(
                lambda: (
                    (r := httpx.get(f"{lens.url}/api/jobs/llama-run7/windows/w1").json())["status"] == "done"
                    and r
                ),
                120,
            )
            causes = w1["causes"]
            assert causes, w1
            alerts = wait_for(
                lambda: (r := httpx.get(f"{lens.url}/api/alerts").json())["total"] >= len(causes) and r, 30
            )
            assert sorted(a["cause"] for a in alerts["alerts"]) == sorted(causes)
            wait_for(lambda: sum(1 for _, st in hook.answered if st == 200) >= len(causes), 60)
            wait_for(lambda: len(slack.answered) >= len(causes), 30)
            # a second slow window: the same causes are still active, nothing new is raised
            send_windows(
                lens.url, "llama-run7", "w2", EXAMPLES / "slow-rank" / "traces", [0, 1, 2, 3], tmp_path
            )
            wait_for(
                lambda: httpx.get(f"{lens.url}/api/jobs/llama-run7/windows/w2").json()["status"] == "done",
                120,
            )
            time.sleep(1.0)
            assert httpx.get(f"{lens.url}/api/alerts").json()["total"] == len(causes)
            one = httpx.get(f"{lens.url}/api/alerts/{alerts['alerts'][0]['id']}").json()
            problems = anyio.run(monitoring_answers_over_budget, f"{lens.url}/mcp", one["id"])
            assert not problems, problems
    per_alert = Counter(r.headers["x-lens-alert-id"] for r in hook.requests)
    assert len(per_alert) == len(causes) and set(per_alert.values()) == {3}  # failed twice, then delivered
    delivered = [r for r, st in hook.answered if st == 200]
    assert len(delivered) == len(causes)
    for r in hook.requests:
        assert verified(r.body, r.headers), r.headers
        body = json.loads(r.body)
        assert body["job"] == "llama-run7" and body["window"] == "w1" and body["cause"] in causes
        assert (
            body["summary"]["slowdown"] > 1.1 and body["link"] == "https://lens.example/api/jobs/llama-run7"
        )
    assert [
        r.headers["x-lens-delivery"] for r in hook.requests if r.headers["x-lens-alert-id"] == one["id"]
    ] == ["1", "2", "3"]
    hook_row = next(o for o in one["outbox"] if o["destination"] == "hook")
    assert hook_row["state"] == "delivered" and [t["status"] for t in hook_row["log"]] == [500, 500, 200]
    assert len(slack.requests) == len(causes)
    msg = json.loads(slack.requests[0].body)
    assert msg["text"].startswith("Straggler alert: llama-run7") and msg["blocks"][0]["type"] == "header"
