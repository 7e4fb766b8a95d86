"""NDTimeline reader: parsed records as JSON Lines, or ``LocalTimelineNDHandler``'s Chrome-trace array.

Two on-disk shapes of veScale's NDTimeline output (METHOD.md B4, B5), gzipped or not:

- **JSON Lines**, one ``DeviceTimerStreamRecord.to_dict()`` per line: ``metric``, ``rank``, ``step``,
  ``stage`` (PP rank), ``dp_rank``, ``tp_rank`` and the lists ``start_ts`` (Unix seconds) and
  ``duration`` (seconds), one entry per event; ``value``, ``ts``, ``ip``, ``model_chunk`` ... are
  not needed.
- **Chrome-trace JSON array** written by ``LocalTimelineNDHandler``: ``ph:"X"`` events with
  ``name`` = metric, ``pid`` = DP rank, ``ts``/``dur`` in µs and ``args`` ``rank``, ``step``,
  ``tp``, ``pp``; metadata (``ph:"M"``) events are skipped.

Ingestion follows B8: one row per event, ``stage = pp_rank``, one traced rank per (DP, PP) cell
(TP rank 0; if several ranks remain, e.g. CP peers, the lowest), batched P2P split and ``seq_id`` /
``mb_id`` / chunk ids derived by :func:`diagnosers.readers.normalize.normalize`. DP and PP sizes
come from a meta yaml or ``--dp/--pp`` when given, else from the largest ranks seen.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from diagnosers.model import Trace, TraceError
from diagnosers.readers import ReadOptions, read_failure, read_head, validate
from diagnosers.readers.kineto import load_json
from diagnosers.readers.normalize import columns_from_lists

FORMAT_NAMES: tuple[str, ...] = ("ndtimeline", "ndtimeline-jsonl", "ndtimeline-chrome")

_RECORD_KEYS = (b'"metric"', b'"start_ts"', b'"duration"')


def _kind(head: bytes) -> str | None:
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text.startswith(b"{"):
        first = text.split(b"\n", 1)[0]
        return "jsonl" if all(k in first for k in _RECORD_KEYS) else None
    if text.startswith(b"["):
        # LocalTimelineNDHandler's events carry args {"rank", "step", "tp", "pp"} and thread names
        # "rank[r] <lane>"; Kineto never writes a top-level array.
        has_args = b'"pp"' in text and b'"tp"' in text and b'"step"' in text
        has_meta = b"dp rank[" in text or b'rank[' in text
        return "chrome" if has_args or has_meta else None
    return None


def sniff(path: Path, head: bytes) -> bool:
    """NDTimeline parsed-record JSON Lines or a ``LocalTimelineNDHandler`` Chrome-trace array."""
    return _kind(head) is not None


def _open_text(path: Path) -> str:
    try:
        with open(path, "rb") as fh:
            data = fh.read()
        if data[:2] == b"\x1f\x8b":
            data = validate.gunzip_bytes(data, str(path))
        validate.check_json_size(len(data), str(path))
        return data.decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise TraceError(read_failure(exc), file=str(path)) from exc


class _Rows:
    """Column builder: one row per NDTimeline event."""

    def __init__(self) -> None:
        self.cols: dict[str, list[Any]] = {
            k: [] for k in ("dp_rank", "stage", "tp", "rank", "step", "optype", "start_ts", "duration")
        }

    def extend(self, *, dp: int, stage: int, tp: int, rank: int, step: int, metric: str,
               starts: Sequence[float], durs: Sequence[float]) -> None:
        n = len(starts)
        c = self.cols
        c["dp_rank"].extend([dp] * n)
        c["stage"].extend([stage] * n)
        c["tp"].extend([tp] * n)
        c["rank"].extend([rank] * n)
        c["step"].extend([step] * n)
        c["optype"].extend([metric] * n)
        c["start_ts"].extend(starts)
        c["duration"].extend(durs)


def _int(rec: dict[str, Any], key: str, where: dict[str, Any], default: int | None = None) -> int:
    v = rec.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int | float) or int(v) != v:
        raise TraceError(f"record field {key!r} is {v!r}, expected an integer", **where)
    return int(v)


def read_jsonl(path: Path, rows: _Rows) -> int:
    """Explode parsed records (one per line) into rows; returns the number of records."""
    n = 0
    for lineno, line in enumerate(_open_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        where: dict[str, Any] = {"file": f"{path}:{lineno}"}
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TraceError(f"line is not JSON: {exc}", **where) from exc
        if not isinstance(rec, dict):
            raise TraceError("line is not a JSON object", **where)
        missing = [k for k in ("metric", "rank", "step", "start_ts", "duration") if k not in rec]
        if missing:
            raise TraceError(f"record lacks {', '.join(missing)} (expected DeviceTimerStreamRecord keys)",
                             **where)
        metric = str(rec["metric"])
        where.update(rank=rec.get("rank"), op=metric)
        rank = _int(rec, "rank", where)
        step = _int(rec, "step", where)
        where["step"] = step
        starts, durs = rec["start_ts"], rec["duration"]
        if not isinstance(starts, list) or not isinstance(durs, list) or len(starts) != len(durs):
            raise TraceError("start_ts and duration must be lists of the same length", **where)
        rows.extend(
            dp=_int(rec, "dp_rank", where),
            stage=_int(rec, "stage", where),
            tp=_int(rec, "tp_rank", where, 0),
            rank=rank,
            step=step,
            metric=metric,
            starts=starts,
            durs=durs,
        )
        n += 1
    return n


def _read_chrome_fast(doc: list[Any], rows: _Rows) -> int | None:
    """Column-wise read of well-formed events; None when any event needs the checking path."""
    xs = [ev for ev in doc if isinstance(ev, dict) and ev.get("ph") == "X"]
    try:
        args = [ev["args"] for ev in xs]
        cols = {
            "dp_rank": np.array([ev["pid"] for ev in xs]),
            "stage": np.array([a.get("pp", 0) for a in args]),
            "tp": np.array([a.get("tp", 0) for a in args]),
            "rank": np.array([a["rank"] for a in args]),
            "step": np.array([a["step"] for a in args]),
            "ts": np.array([ev["ts"] for ev in xs], dtype=np.float64) / 1e6,
            "dur": np.array([ev.get("dur", 0.0) for ev in xs], dtype=np.float64) / 1e6,
        }
        names = [str(ev.get("name")) for ev in xs]
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    if any(cols[k].dtype.kind not in "iu" for k in ("dp_rank", "stage", "tp", "rank", "step")):
        return None
    c = rows.cols
    for key, col in (("dp_rank", "dp_rank"), ("stage", "stage"), ("tp", "tp"), ("rank", "rank"),
                     ("step", "step"), ("start_ts", "ts"), ("duration", "dur")):
        c[key].extend(cols[col].tolist())
    c["optype"].extend(names)
    return len(xs)


def read_chrome(path: Path, rows: _Rows) -> int:
    """Rows from a ``LocalTimelineNDHandler`` Chrome-trace array; returns the number of events."""
    doc = load_json(path)
    if not isinstance(doc, list):
        raise TraceError("expected a JSON array of Chrome-trace events", file=str(path))
    fast = _read_chrome_fast(doc, rows)
    if fast is not None:
        return fast
    # slow path: event by event, so that the error names the offending event
    n = 0
    for i, ev in enumerate(doc):
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            continue
        args = ev.get("args") or {}
        where: dict[str, Any] = {"file": f"{path}[{i}]", "op": ev.get("name")}
        if not isinstance(args, dict) or "rank" not in args or "step" not in args:
            raise TraceError("event lacks args.rank / args.step (not LocalTimelineNDHandler output)", **where)
        try:
            ts, dur = float(ev["ts"]) / 1e6, float(ev.get("dur", 0.0)) / 1e6
        except (KeyError, TypeError, ValueError) as exc:
            raise TraceError(f"event without numeric ts/dur: {exc}", **where) from exc
        rows.extend(
            dp=_int(ev, "pid", where),
            stage=_int(args, "pp", where, 0),
            tp=_int(args, "tp", where, 0),
            rank=_int(args, "rank", where),
            step=_int(args, "step", where),
            metric=str(ev.get("name")),
            starts=[ts],
            durs=[dur],
        )
        n += 1
    return n


def read(paths: list[Path], options: ReadOptions) -> Trace:
    """Read NDTimeline files (either shape, mixed is fine) into a validated ``Trace``."""
    from diagnosers.readers.artifact import build_meta, load_meta_yaml
    from diagnosers.readers.normalize import normalize

    rows = _Rows()
    notes: list[str] = []
    for p in paths:
        kind = _kind(read_head(p))
        if kind is None and options.format in ("ndtimeline-jsonl",):
            kind = "jsonl"
        if kind is None and options.format in ("ndtimeline-chrome",):
            kind = "chrome"
        if kind is None:
            # load_trace already set aside files this reader does not recognise among ones it does;
            # reaching here means it recognises none of them
            raise TraceError(
                "not NDTimeline output: expected JSON Lines of parsed records (metric, rank, step, "
                "start_ts, duration) or a LocalTimelineNDHandler Chrome-trace array",
                file=str(p),
            )
        if kind == "jsonl":
            n = read_jsonl(p, rows)
            notes.append(f"{p.name}: {n} NDTimeline parsed records")
        else:
            n = read_chrome(p, rows)
            notes.append(f"{p.name}: {n} LocalTimelineNDHandler events")
    c = rows.cols
    if not c["rank"]:
        raise TraceError("no NDTimeline events in the given files", file=str(paths[0]))
    arr = columns_from_lists(c)
    tp = np.asarray(c["tp"], dtype=np.int64)
    # One traced rank per (dp, stage): TP rank 0, then the lowest remaining rank (CP peers).
    keep = tp == 0
    if not keep.all():
        notes.append(f"dropped {int((~keep).sum())} events of TP ranks > 0 (TP is collapsed)")
    cell = arr["dp_rank"] * (int(arr["stage"].max()) + 1) + arr["stage"]
    lowest: dict[int, int] = {}
    for w, r in zip(cell[keep].tolist(), arr["rank"][keep].tolist(), strict=True):
        lowest[w] = min(r, lowest.get(w, r))
    first_rank = np.array([lowest.get(int(w), -1) for w in cell]) == arr["rank"]
    if (keep & ~first_rank).any():
        notes.append(
            f"dropped {int((keep & ~first_rank).sum())} events of further ranks sharing a (DP, PP) "
            "cell (CP peers); kept the lowest rank of each"
        )
    keep &= first_rank
    arr = {k: v[keep] for k, v in arr.items()}
    meta_path = options.meta_path
    base = load_meta_yaml(meta_path) if meta_path else {}
    meta = build_meta(arr, base, options, "ndtimeline", meta_path)
    source = str(paths[0]) if len(paths) == 1 else f"{paths[0]} (+{len(paths) - 1} files)"
    trace = normalize(arr, meta, source=source)
    if meta_path is None and not options.overrides():
        notes.append(f"no meta yaml: took dp={meta.dp}, pp={meta.pp} from the records")
    trace.notes = notes + trace.notes
    return trace
