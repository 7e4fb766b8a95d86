"""Signatures: outgoing JSON webhooks (ours) and incoming slash commands (Slack, Mattermost).

**Generic webhook scheme** (what a receiver checks; docs/ALERTS.md shows it in a few lines)::

    X-Lens-Timestamp: <Unix seconds when the try was sent>
    X-Lens-Signature: v1=<hex HMAC-SHA256(secret, "<timestamp>." + raw body bytes)>
    X-Lens-Alert-Id:  <alert id: the same on every try, so a receiver can drop repeats>
    X-Lens-Delivery:  <try number, 1, 2, ...>

A receiver recomputes the HMAC over the timestamp, a dot and the exact body bytes, compares in
constant time and refuses timestamps more than 5 minutes from its clock (a replayed body).

**Slack** slash commands: ``X-Slack-Signature: v0=<hex HMAC-SHA256(signing secret,
"v0:<X-Slack-Request-Timestamp>:<raw body>")>``, a 5-minute replay window, checked with
``slack_sdk.signature.SignatureVerifier`` (constant-time compare). **Mattermost**: the command's
token, in ``Authorization: Token <token>`` or the form's ``token`` field, compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping

from slack_sdk.signature import Clock, SignatureVerifier

REPLAY_WINDOW_S = 300


def webhook_signature(secret: str, timestamp: int, body: bytes) -> str:
    """``v1=<hex>``: HMAC-SHA256 keyed with ``secret`` over ``b"<timestamp>." + body``."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return "v1=" + mac.hexdigest()


def webhook_headers(
    secret: str, body: bytes, alert_id: str, attempt: int, now: float | None = None
) -> dict[str, str]:
    """The headers of one signed webhook try (see the module docstring)."""
    ts = int(time.time() if now is None else now)
    return {
        "Content-Type": "application/json",
        "X-Lens-Timestamp": str(ts),
        "X-Lens-Signature": webhook_signature(secret, ts, body),
        "X-Lens-Alert-Id": alert_id,
        "X-Lens-Delivery": str(attempt),
    }


def verify_webhook(secret: str, body: bytes, headers: Mapping[str, str], now: float | None = None) -> bool:
    """Whether a received webhook carries a valid, fresh signature (header names any case)."""
    low = {k.lower(): v for k, v in headers.items()}
    raw_ts, sig = low.get("x-lens-timestamp", ""), low.get("x-lens-signature", "")
    if not raw_ts.isdigit() or not sig:
        return False
    now = time.time() if now is None else now
    if abs(now - int(raw_ts)) > REPLAY_WINDOW_S:
        return False
    return hmac.compare_digest(webhook_signature(secret, int(raw_ts), body), sig)


class _FixedClock(Clock):
    def __init__(self, now: float):
        self._now = now

    def now(self) -> float:
        return self._now


def slack_refusal(
    secret: str, body: bytes, headers: Mapping[str, str], now: float | None = None
) -> str | None:
    """Why a Slack-signed request is refused (``None``: it is valid): no signature, a timestamp
    that is not a number or is outside the 5-minute window, or a signature that does not match
    the body (tampered or signed with another secret)."""
    low = {k.lower(): v for k, v in headers.items()}
    ts, sig = low.get("x-slack-request-timestamp"), low.get("x-slack-signature")
    if not ts or not sig:
        return "unsigned request: X-Slack-Request-Timestamp and X-Slack-Signature are required"
    if not ts.strip().isdigit():
        return "X-Slack-Request-Timestamp is not a Unix time"
    clock_now = time.time() if now is None else now
    if abs(clock_now - int(ts)) > REPLAY_WINDOW_S:
        return "stale request: the timestamp is more than 5 minutes from the server's clock"
    verifier = SignatureVerifier(secret, clock=_FixedClock(clock_now))
    if not verifier.is_valid(body, ts, sig):
        return "bad signature: the body does not match X-Slack-Signature"
    return None


def mattermost_refusal(token: str, headers: Mapping[str, str], form_token: str | None) -> str | None:
    """Why a Mattermost command is refused (``None``: its token matches, in constant time)."""
    low = {k.lower(): v for k, v in headers.items()}
    auth = low.get("authorization", "")
    given = auth[6:].strip() if auth.lower().startswith("token ") else (form_token or "")
    if not given:
        return "no Mattermost command token (Authorization: Token ... or the form's token field)"
    if not hmac.compare_digest(given.encode(), token.encode()):
        return "the Mattermost command token does not match"
    return None
