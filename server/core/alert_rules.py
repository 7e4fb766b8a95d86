"""Alert rules: a YAML file (``--alerts alerts.yaml``) validated at start, errors naming the line.

The file::

    destinations:
      oncall:                       # a Slack-compatible incoming webhook (Block Kit message)
        type: slack
        url: https://hooks.slack.com/services/T000/B000/XXXX
      pager:                        # a generic JSON webhook, signed (see server.core.signing)
        type: webhook
        url: https://pager.example.internal/straggler
        secret_env: LENS_WEBHOOK_SECRET   # or secret: "...", or secret_file: /path
    rules:
      - name: important-jobs-slow
        jobs: ["llama-*", "gpt-prod-*"]   # globs on the job name (default: every job)
        when:                             # any of these fires the rule
          slowdown_above: 1.2             # S above it: one alert per cause found (or "slowdown")
          causes: [faulty-machine]        # these causes, at any S: one alert each
          trend: growing                  # S grows over the job's last windows (rank correlation)
          fidelity: unreliable            # the simulation does not reproduce the trace
        to: [oncall, pager]
        quiet:
          reminder: 6h                    # while a cause stays active, repeat at most this often
    delivery:
      max_tries: 8                        # per alert and destination
      backoff: 2s                         # first retry delay, doubled each try (with jitter)
      max_backoff: 10m
      timeout: 10s                        # one HTTP try

Quiet rules: one alert per (rule, job, cause) until the cause clears (a finished window of the
job where the rule does not fire for it); ``reminder`` (default: never) repeats an active one.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

DEST_TYPES = ("slack", "webhook")
FIDELITY_VERDICTS = ("unreliable", "degraded")  # diagnosers.vocab.FidelityVerdict, less "good"
TREND_KINDS = ("growing",)
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


class RulesError(ValueError):
    """A rules file that cannot be used; the message names the file and line."""


@dataclass(frozen=True)
class Destination:
    name: str
    type: str
    url: str
    secret: str | None = None


@dataclass(frozen=True)
class Rule:
    name: str
    jobs: tuple[str, ...] = ("*",)
    slowdown_above: float | None = None
    causes: tuple[str, ...] = ()
    trend: str | None = None
    fidelity: str | None = None
    to: tuple[str, ...] = ()
    reminder_s: float | None = None

    def matches_job(self, job: str) -> bool:
        return any(fnmatch.fnmatchcase(job, g) for g in self.jobs)


@dataclass(frozen=True)
class Delivery:
    max_tries: int = 8
    backoff_s: float = 2.0
    max_backoff_s: float = 600.0
    timeout_s: float = 10.0


@dataclass(frozen=True)
class AlertRules:
    rules: tuple[Rule, ...] = ()
    destinations: dict[str, Destination] = field(default_factory=dict)
    delivery: Delivery = field(default_factory=Delivery)
    source: str = ""


# -- the YAML walk, keeping line numbers --------------------------------------------------------


class _Ctx:
    def __init__(self, source: str):
        self.source = source

    def err(self, node: yaml.Node | None, message: str) -> RulesError:
        where = f"{self.source}, line {node.start_mark.line + 1}" if node is not None else self.source
        return RulesError(f"{where}: {message}")

    def mapping(
        self, node: yaml.Node, what: str, allowed: tuple[str, ...]
    ) -> dict[str, tuple[yaml.Node, yaml.Node]]:
        if not isinstance(node, yaml.MappingNode):
            raise self.err(node, f"{what} must be a mapping")
        out: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        for k, v in node.value:
            key = k.value if isinstance(k, yaml.ScalarNode) else None
            if not isinstance(key, str):
                raise self.err(k, f"{what}: keys must be strings")
            if key not in allowed:
                raise self.err(k, f"{what}: unknown key {key!r} (allowed: {', '.join(allowed)})")
            if key in out:
                raise self.err(k, f"{what}: key {key!r} given twice")
            out[key] = (k, v)
        return out

    def scalar(self, node: yaml.Node, what: str) -> Any:
        if not isinstance(node, yaml.ScalarNode):
            raise self.err(node, f"{what} must be a single value")
        return yaml.safe_load(yaml.serialize(node))

    def string(self, node: yaml.Node, what: str) -> str:
        value = self.scalar(node, what)
        if not isinstance(value, str) or not value:
            raise self.err(node, f"{what} must be a non-empty string")
        return value

    def strings(self, node: yaml.Node, what: str) -> tuple[str, ...]:
        if isinstance(node, yaml.ScalarNode):
            return (self.string(node, what),)
        if not isinstance(node, yaml.SequenceNode) or not node.value:
            raise self.err(node, f"{what} must be a string or a non-empty list of strings")
        return tuple(self.string(n, what) for n in node.value)

    def number(self, node: yaml.Node, what: str, lo: float, hi: float | None = None) -> float:
        value = self.scalar(node, what)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.err(node, f"{what} must be a number, not {value!r}")
        if value < lo or (hi is not None and value > hi):
            raise self.err(
                node, f"{what}={value} must be >= {lo}" + (f" and <= {hi}" if hi is not None else "")
            )
        return float(value)

    def duration(self, node: yaml.Node, what: str) -> float:
        value = self.scalar(node, what)
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            return float(value)
        m = DURATION_RE.match(str(value)) if isinstance(value, str) else None
        if not m or float(m.group(1)) <= 0:
            raise self.err(node, f"{what}={value!r} is not a positive duration (e.g. 90s, 30m, 6h)")
        return float(m.group(1)) * UNITS[m.group(2)]


def _destination(ctx: _Ctx, name: str, node: yaml.Node) -> Destination:
    keys = ctx.mapping(node, f"destination {name!r}", ("type", "url", "secret", "secret_env", "secret_file"))
    if "type" not in keys or "url" not in keys:
        raise ctx.err(node, f"destination {name!r} needs type ({' or '.join(DEST_TYPES)}) and url")
    kind = ctx.string(keys["type"][1], f"destination {name!r} type")
    if kind not in DEST_TYPES:
        raise ctx.err(
            keys["type"][1], f"destination {name!r}: type {kind!r} is not one of {', '.join(DEST_TYPES)}"
        )
    url = ctx.string(keys["url"][1], f"destination {name!r} url")
    if not re.match(r"^https?://[^/\s]+", url):
        raise ctx.err(keys["url"][1], f"destination {name!r}: url {url!r} is not an http(s) URL")
    given = [k for k in ("secret", "secret_env", "secret_file") if k in keys]
    if len(given) > 1:
        raise ctx.err(keys[given[1]][0], f"destination {name!r}: give one of secret, secret_env, secret_file")
    secret: str | None = None
    if given:
        k = given[0]
        raw = ctx.string(keys[k][1], f"destination {name!r} {k}")
        if k == "secret":
            secret = raw
        elif k == "secret_env":
            secret = os.environ.get(raw)
            if not secret:
                raise ctx.err(keys[k][1], f"destination {name!r}: environment variable {raw} is not set")
        else:
            try:
                secret = Path(raw).expanduser().read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise ctx.err(keys[k][1], f"destination {name!r}: cannot read {raw}: {exc.strerror}") from exc
        if len(secret) < 16:
            raise ctx.err(keys[k][1], f"destination {name!r}: the secret must be at least 16 characters")
    if kind == "webhook" and secret is None:
        raise ctx.err(node, f"destination {name!r}: a webhook destination needs a secret to sign with")
    return Destination(name, kind, url, secret)


def _rule(ctx: _Ctx, node: yaml.Node, known: dict[str, Destination], causes: set[str]) -> Rule:
    keys = ctx.mapping(node, "rule", ("name", "jobs", "when", "to", "quiet"))
    for need in ("name", "when", "to"):
        if need not in keys:
            raise ctx.err(node, f"a rule needs {need!r}")
    name = ctx.string(keys["name"][1], "rule name")
    if not NAME_RE.match(name):
        raise ctx.err(keys["name"][1], f"rule name {name!r} must be [A-Za-z0-9._-], at most 64 characters")
    jobs = ctx.strings(keys["jobs"][1], f"rule {name!r} jobs") if "jobs" in keys else ("*",)
    when = ctx.mapping(
        keys["when"][1], f"rule {name!r} when", ("slowdown_above", "causes", "trend", "fidelity")
    )
    if not when:
        raise ctx.err(keys["when"][1], f"rule {name!r}: 'when' needs at least one condition")
    slow = ctx.number(when["slowdown_above"][1], "slowdown_above", 1.0) if "slowdown_above" in when else None
    rule_causes: tuple[str, ...] = ()
    if "causes" in when:
        rule_causes = ctx.strings(when["causes"][1], f"rule {name!r} causes")
        for c, n in zip(rule_causes, _items(when["causes"][1]), strict=True):
            if causes and c not in causes:
                raise ctx.err(n, f"rule {name!r}: unknown cause {c!r} (known: {', '.join(sorted(causes))})")
    trend = ctx.string(when["trend"][1], "trend") if "trend" in when else None
    if trend is not None and trend not in TREND_KINDS:
        raise ctx.err(when["trend"][1], f"trend {trend!r} is not one of {', '.join(TREND_KINDS)}")
    fid = ctx.string(when["fidelity"][1], "fidelity") if "fidelity" in when else None
    if fid is not None and fid not in FIDELITY_VERDICTS:
        raise ctx.err(when["fidelity"][1], f"fidelity {fid!r} is not one of {', '.join(FIDELITY_VERDICTS)}")
    to = ctx.strings(keys["to"][1], f"rule {name!r} to")
    for d, n in zip(to, _items(keys["to"][1]), strict=True):
        if d not in known:
            have = ", ".join(sorted(known)) or "none defined"
            raise ctx.err(n, f"rule {name!r}: no destination {d!r} (destinations: {have})")
    reminder = None
    if "quiet" in keys:
        quiet = ctx.mapping(keys["quiet"][1], f"rule {name!r} quiet", ("reminder",))
        if "reminder" in quiet:
            reminder = ctx.duration(quiet["reminder"][1], "reminder")
    return Rule(name, jobs, slow, rule_causes, trend, fid, to, reminder)


def _items(node: yaml.Node) -> list[yaml.Node]:
    return list(node.value) if isinstance(node, yaml.SequenceNode) else [node]


def parse_rules(text: str, source: str = "alerts.yaml", known_causes: set[str] | None = None) -> AlertRules:
    """Parse and validate a rules document; :class:`RulesError` names the line of the first
    problem. ``known_causes`` (the vocabulary's cause ids) checks ``causes:`` entries."""
    ctx = _Ctx(source)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = f", line {mark.line + 1}" if mark is not None else ""
        raise RulesError(f"{source}{line}: not valid YAML: {exc.problem}") from exc
    if root is None:
        raise RulesError(f"{source}: the file is empty; it needs destinations and rules")
    top = ctx.mapping(root, "the rules file", ("destinations", "rules", "delivery"))
    if "rules" not in top:
        raise ctx.err(root, "the rules file needs a 'rules' list")
    dests: dict[str, Destination] = {}
    if "destinations" in top:
        for k, v in ctx.mapping(
            top["destinations"][1], "destinations", tuple(_keys(top["destinations"][1]))
        ).values():
            name = ctx.string(k, "destination name")
            if not NAME_RE.match(name):
                raise ctx.err(k, f"destination name {name!r} must be [A-Za-z0-9._-]")
            dests[name] = _destination(ctx, name, v)
    rules_node = top["rules"][1]
    if not isinstance(rules_node, yaml.SequenceNode) or not rules_node.value:
        raise ctx.err(rules_node, "'rules' must be a non-empty list")
    rules: list[Rule] = []
    for n in rules_node.value:
        rule = _rule(ctx, n, dests, known_causes or set())
        if any(r.name == rule.name for r in rules):
            raise ctx.err(n, f"two rules are named {rule.name!r}")
        rules.append(rule)
    delivery = Delivery()
    if "delivery" in top:
        d = ctx.mapping(top["delivery"][1], "delivery", ("max_tries", "backoff", "max_backoff", "timeout"))
        delivery = Delivery(
            max_tries=int(ctx.number(d["max_tries"][1], "max_tries", 1, 100)) if "max_tries" in d else 8,
            backoff_s=ctx.duration(d["backoff"][1], "backoff") if "backoff" in d else 2.0,
            max_backoff_s=ctx.duration(d["max_backoff"][1], "max_backoff") if "max_backoff" in d else 600.0,
            timeout_s=ctx.duration(d["timeout"][1], "timeout") if "timeout" in d else 10.0,
        )
    return AlertRules(tuple(rules), dests, delivery, source)


def _keys(node: yaml.Node) -> list[str]:
    if not isinstance(node, yaml.MappingNode):
        return []
    return [k.value for k, _ in node.value if isinstance(k, yaml.ScalarNode)]


def load_rules(path: str | Path, known_causes: set[str] | None = None) -> AlertRules:
    """Read and validate a rules file (``--alerts``)."""
    p = Path(path).expanduser()
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise RulesError(f"cannot read --alerts {p}: {exc.strerror}") from exc
    return parse_rules(text, str(p), known_causes)


# -- evaluation ----------------------------------------------------------------------------------


def firing(rule: Rule, summary: dict[str, Any], trend: dict[str, Any] | None) -> list[str]:
    """The alert keys a rule raises for one finished window's summary (see ``window_summary``):
    the cause ids found when S is above ``slowdown_above`` (``slowdown`` when none is named),
    the listed ``causes`` present, ``trend`` when S grows over the job's recent windows, and
    ``fidelity`` when the report's fidelity verdict is the one asked for. Keys are unique."""
    keys: list[str] = []
    found = [str(c["id"]) for c in summary.get("causes") or []]
    s = summary.get("slowdown")
    if rule.slowdown_above is not None and isinstance(s, int | float) and s > rule.slowdown_above:
        keys.extend(found or ["slowdown"])
    keys.extend(c for c in rule.causes if c in found)
    if rule.trend == "growing" and trend and trend.get("slowdown", {}).get("growing"):
        keys.append("trend")
    verdict = (summary.get("fidelity") or {}).get("verdict")
    if rule.fidelity is not None and verdict == rule.fidelity:
        keys.append("fidelity")
    return list(dict.fromkeys(keys))
