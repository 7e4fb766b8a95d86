"""Alert rules (errors name the line), webhook and slash-command signatures, chat renderings."""

from __future__ import annotations

import hashlib
import hmac
import time
from pathlib import Path
from typing import Any

import pytest

from diagnosers.vocab import CauseId
from server.core.alert_rules import RulesError, firing, load_rules, parse_rules
from server.core.chat_render import render_blocks, render_markdown, slack_message
from server.core.history import compare, spearman, trend, window_summary
from server.core.signing import mattermost_refusal, slack_refusal, verify_webhook, webhook_headers

SECRET = "webhook-secret-0123456789"

RULES = f"""\
destinations:
  chat:
    type: slack
    url: http://127.0.0.1:9/hooks/slack
  pager:
    type: webhook
    url: http://127.0.0.1:9/hook
    secret: {SECRET}
rules:
  - name: slow
    jobs: ["llama-*", "exp-?"]
    when:
      slowdown_above: 1.1
      causes: [faulty-machine]
      fidelity: unreliable
    to: [chat, pager]
    quiet:
      reminder: 6h
delivery:
  max_tries: 5
  backoff: 500ms
"""


def causes() -> set[str]:
    return {str(c) for c in CauseId}


def test_a_valid_rules_file(tmp_path: Path) -> None:
    path = tmp_path / "alerts.yaml"
    path.write_text(RULES)
    rules = load_rules(path, causes())
    (rule,) = rules.rules
    assert rule.matches_job("llama-70b") and rule.matches_job("exp-1") and not rule.matches_job("gpt")
    assert rule.reminder_s == 6 * 3600 and rule.to == ("chat", "pager")
    assert rules.destinations["pager"].secret == SECRET and rules.delivery.backoff_s == 0.5
    assert rules.delivery.max_tries == 5


@pytest.mark.parametrize(
    ("old", "new", "line", "message"),
    [
        ("      slowdown_above: 1.1", "      slowdown_above: fast", 13, "must be a number"),
        (
            "      causes: [faulty-machine]",
            "      causes: [faulty-machin]",
            14,
            "unknown cause 'faulty-machin'",
        ),
        ("    to: [chat, pager]", "    to: [chat, pagr]", 16, "no destination 'pagr'"),
        ("      reminder: 6h", "      reminder: soon", 18, "not a positive duration"),
        ("    type: webhook", "    type: email", 6, "type 'email' is not one of"),
        (
            f"    secret: {SECRET}",
            "    secret_env: NO_SUCH_VARIABLE_SET",
            8,
            "NO_SUCH_VARIABLE_SET is not set",
        ),
        ("      fidelity: unreliable", "      fidelty: unreliable", 15, "unknown key 'fidelty'"),
        # the YAML parser notices the unclosed list on the next line
        ("  max_tries: 5", "  max_tries: [5", 21, "not valid YAML"),
    ],
)
def test_rule_errors_name_the_line(old: str, new: str, line: int, message: str) -> None:
    text = RULES.replace(old, new)
    assert text != RULES
    with pytest.raises(RulesError) as err:
        parse_rules(text, "alerts.yaml", causes())
    assert str(err.value).startswith(f"alerts.yaml, line {line}: ")
    assert message in str(err.value)


def test_firing_keys() -> None:
    (rule,) = parse_rules(RULES, known_causes=causes()).rules
    slow = {"slowdown": 1.3, "causes": [{"id": "faulty-machine"}, {"id": "gc-pause"}], "fidelity": None}
    assert firing(rule, slow, None) == ["faulty-machine", "gc-pause"]
    fast = {"slowdown": 1.02, "causes": [{"id": "faulty-machine"}], "fidelity": {"verdict": "unreliable"}}
    assert firing(rule, fast, None) == ["faulty-machine", "fidelity"]
    assert firing(rule, {"slowdown": 1.3, "causes": []}, None) == ["slowdown"]
    assert firing(rule, {"slowdown": 1.05, "causes": []}, None) == []


def independent_check(secret: str, body: bytes, headers: dict[str, str]) -> bool:
    """A receiver's own check of the documented scheme, written from docs/ALERTS.md."""
    ts = headers["X-Lens-Timestamp"]
    want = "v1=" + hmac.new(secret.encode(), ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(want, headers["X-Lens-Signature"]) and abs(time.time() - int(ts)) < 300


def test_webhook_signature_is_verifiable() -> None:
    body = b'{"alert_id": "a1"}'
    h = webhook_headers(SECRET, body, "a1", 2)
    assert independent_check(SECRET, body, h) and verify_webhook(SECRET, body, h)
    assert h["X-Lens-Alert-Id"] == "a1" and h["X-Lens-Delivery"] == "2"
    assert not verify_webhook(SECRET, body + b" ", h)
    assert not verify_webhook("another-secret-0123456", body, h)
    old = webhook_headers(SECRET, body, "a1", 1, now=time.time() - 301)
    assert not verify_webhook(SECRET, body, old)


def slack_headers(secret: str, body: bytes, ts: int) -> dict[str, str]:
    sig = "v0=" + hmac.new(secret.encode(), f"v0:{ts}:".encode() + body, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": str(ts), "X-Slack-Signature": sig}


def test_slack_signatures() -> None:
    body, now = b"command=%2Flens&text=status+job", int(time.time())
    assert slack_refusal("slack-secret", body, slack_headers("slack-secret", body, now)) is None
    assert "unsigned" in (slack_refusal("slack-secret", body, {}) or "")
    assert "stale" in (
        slack_refusal("slack-secret", body, slack_headers("slack-secret", body, now - 301)) or ""
    )
    tampered = slack_refusal("slack-secret", body + b"x", slack_headers("slack-secret", body, now))
    assert "bad signature" in (tampered or "")
    assert "not a Unix time" in (
        slack_refusal("s", body, {"X-Slack-Request-Timestamp": "x", "X-Slack-Signature": "v0=1"}) or ""
    )


def test_mattermost_token() -> None:
    assert mattermost_refusal("mm-token", {"Authorization": "Token mm-token"}, None) is None
    assert mattermost_refusal("mm-token", {}, "mm-token") is None
    assert "does not match" in (mattermost_refusal("mm-token", {"Authorization": "Token nope"}, None) or "")
    assert "no Mattermost" in (mattermost_refusal("mm-token", {}, None) or "")


@pytest.fixture(scope="module")
def st_summary() -> dict[str, Any]:
    from diagnosers.diagnose import diagnose
    from diagnosers.readers import ReadOptions, load_trace
    from diagnosers.samples import artifact_trace

    t = artifact_trace("ST")
    return window_summary(diagnose(load_trace([t], ReadOptions(meta_path=t.with_name("meta-ST.yaml")))))


def test_one_chat_rendering_of_a_real_diagnosis(st_summary: dict[str, Any]) -> None:
    md = render_markdown(st_summary, "job st / window w1", "http://lens/jobs/st")
    assert "**S = 1.18" in md and "`stage-imbalance`" in md and "stage 3" in md
    verdict = st_summary["fidelity"]["verdict"]
    assert f"fidelity: {verdict} (unexplained error " in md
    gain = st_summary["causes"][0]["marginal_gain"]
    assert gain > 1.0 and f"×{gain:.3f}" in md  # the speedup of fixing that cause alone
    old = dict(st_summary, fidelity=None, causes=[{**c, "marginal_gain": None} for c in st_summary["causes"]])
    old_md = render_markdown(old, "a summary stored before the report carried fidelity")
    assert "fidelity: unknown" in old_md and "| unknown |" in old_md  # the table cell of the gain
    assert "Best remedy" in md and "[Open the job](http://lens/jobs/st)" in md
    blocks = render_blocks(st_summary, "job st", "http://lens/jobs/st", grid="#..\n...")
    kinds = [b["type"] for b in blocks]
    assert kinds[0] == "header" and "actions" in kinds and "image" not in kinds
    assert any("```#.." in b.get("text", {}).get("text", "") for b in blocks)
    with_image = render_blocks(st_summary, "job st", image_url="https://lens.example/h.png")
    assert any(b["type"] == "image" for b in with_image)
    msg = slack_message(st_summary, "job st")
    assert msg["text"].startswith("job st: S = 1.18") and msg["blocks"]


def test_trend_and_compare(st_summary: dict[str, Any]) -> None:
    assert spearman([1.0, 1.1]) is None and spearman([1.0, 1.0, 1.0]) is None
    assert spearman([1.0, 1.2, 1.5, 1.4]) == pytest.approx(0.8)
    rising = [dict(st_summary, slowdown=s) for s in (1.05, 1.1, 1.2, 1.3)]
    t = trend(rising)
    assert t["slowdown"]["growing"] and t["slowdown"]["rho"] == pytest.approx(1.0)
    assert t["causes"]["stage-imbalance"]["windows"] == 4
    fixed = dict(
        st_summary, slowdown=1.02, causes=[], workers=[{**w, "slowdown": 1.0} for w in st_summary["workers"]]
    )
    c = compare(st_summary, fixed)
    assert c["improved"] and c["causes"][0] == {**c["causes"][0], "id": "stage-imbalance", "change": "gone"}
    assert c["remedies"][0]["actual_speedup"] == pytest.approx(st_summary["slowdown"] / 1.02)
    assert c["workers"] and c["workers"][0]["change"] < 0
