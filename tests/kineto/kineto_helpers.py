"""Build small Kineto (Chrome-trace) documents for reader tests."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any


def span(name: str, ts: float, dur: float, cat: str = "user_annotation", tid: int = 1,
         args: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
            "args": args or {}}


def doc(events: list[dict[str, Any]], *, rank: int | None, world: int | None = None,
        pg_config: list[dict[str, Any]] | None = None, base_ns: int | None = None) -> dict[str, Any]:
    d: dict[str, Any] = {"schemaVersion": 1, "traceEvents": events}
    info: dict[str, Any] = {"backend": "gloo"}
    if rank is not None:
        info["rank"] = rank
    if world is not None:
        info["world_size"] = world
    if pg_config is not None:
        info["pg_config"] = pg_config
    d["distributedInfo"] = info
    if base_ns is not None:
        d["baseTimeNanoseconds"] = base_ns
    return d


def write(path: Path, d: dict[str, Any] | list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(d).encode()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


def named_step(step: int, t0: float, *, fwd: float = 1000.0, bwd: float = 2000.0,
               dp_ar: float = 300.0) -> list[dict[str, Any]]:
    """One single-stage step (µs): ProfilerStep, forward, backward, grads-reduce, optimizer."""
    t = t0
    ev = [span(f"ProfilerStep#{step}", t0, fwd + bwd + dp_ar + 200.0)]
    ev.append(span("forward-compute", t, fwd))
    t += fwd
    ev.append(span("backward-compute", t, bwd))
    t += bwd
    ev.append(span("grads-reduce", t, dp_ar))
    ev.append(span("gloo:all_reduce", t + 10, dp_ar - 20, tid=7))
    t += dp_ar
    ev.append(span("optimizer", t, 100.0))
    return ev
