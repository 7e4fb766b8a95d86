"""Write a ``Trace`` as NDTimeline output: parsed-record JSON Lines and the local Chrome-trace array.

The inverse of :mod:`diagnosers.readers.ndtimeline`, used by the round-trip tests and to hand a
trace to NDTimeline-based tooling. Both shapes follow veScale's open-source NDTimeline (METHOD.md
B4, B5):

- :func:`write_records_jsonl`: one ``DeviceTimerStreamRecord.to_dict()`` per (rank, metric, step),
  events in start order, ``value`` = mean duration, ``model_chunk`` 0 (as the open-source code);
- :func:`write_local_timeline`: ``LocalTimelineNDHandler``'s JSON array: ``X`` events with
  ``pid`` = DP rank, ``tid`` = rank*10 + lane, µs times and ``args`` ``rank/step/tp/pp``, plus the
  ``thread_name`` / ``thread_sort_index`` / ``process_name`` metadata events.

``epoch`` is added to every ``start_ts`` (NDTimeline times are Unix seconds; artifact-schema traces
are often relative to the step start). A ``.gz`` suffix gzips the output.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from diagnosers.model import OPTYPES, Trace

# LocalTimelineNDHandler's lanes (thread sort index, name) per metric; everything else is "other".
_LANES: dict[str, tuple[int, str]] = {}
for _names, _lane in (
    (("forward-compute", "backward-compute", "embedding-grads-all-reduce", "optimizer",
      "optimizer-clip-main-grad"), (0, "main")),
    (("forward-recv", "backward-send"), (1, "pp ->")),
    (("forward-send", "backward-recv"), (2, "pp <-")),
    (("layernorm-grads-all-reduce",), (4, "tp collective")),
    (("grads-reduce-scatter", "params-all-gather", "separate-grads-all-reduce"), (5, "dp collective")),
):
    for _n in _names:
        _LANES[_n] = _lane
_OTHER_LANE = (6, "other")


def _open_out(path: Path) -> IO[str]:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".gz":
        return gzip.open(path, "wt", encoding="utf-8", compresslevel=6)
    return open(path, "w", encoding="utf-8")


def _records(trace: Trace, epoch: float, parsed_at: int) -> Iterator[dict[str, Any]]:
    ops = trace.ops
    if len(ops) == 0:
        return
    gph = trace.meta.gpus_per_host
    order = np.lexsort((ops.start_ts, ops.step, ops.optype, ops.rank))
    key = np.stack([ops.rank[order], ops.optype[order].astype(np.int64), ops.step[order]], axis=1)
    breaks = np.flatnonzero(np.any(key[1:] != key[:-1], axis=1)) + 1
    for grp in np.split(order, breaks):
        i = int(grp[0])
        rank = int(ops.rank[i])
        durs = ops.duration[grp].tolist()
        yield {
            "ts": parsed_at,
            "rank": rank,
            "metric": OPTYPES[int(ops.optype[i])],
            "iteration": 0,
            "step": int(ops.step[i]),
            "value": float(np.mean(durs)),
            "start_ts": (ops.start_ts[grp] + epoch).tolist(),
            "duration": durs,
            "model_chunk": 0,
            "stage": int(ops.stage[i]),
            "dp_rank": int(ops.dp_rank[i]),
            "tp_rank": 0,
            "ip": f"10.0.{rank // gph // 250}.{rank // gph % 250 + 1}",
            "role": 0,
            "trial": "0",
            "run_id": trace.meta.run_id,
        }


def write_records_jsonl(trace: Trace, path: Path, *, epoch: float = 0.0, parsed_at: int = 0) -> int:
    """Write parsed NDTimeline records, one JSON object per line; returns the number of records."""
    n = 0
    with _open_out(Path(path)) as fh:
        for rec in _records(trace, epoch, parsed_at):
            fh.write(json.dumps(rec) + "\n")
            n += 1
    return n


def write_local_timeline(trace: Trace, path: Path, *, epoch: float = 0.0) -> int:
    """Write ``LocalTimelineNDHandler``'s Chrome-trace JSON array; returns the number of X events."""
    ops = trace.ops
    order = np.argsort(ops.start_ts, kind="stable")
    metrics = np.asarray(OPTYPES)[ops.optype[order]].tolist()
    ranks = ops.rank[order].tolist()
    dps = ops.dp_rank[order].tolist()
    steps = ops.step[order].tolist()
    stages = ops.stage[order].tolist()
    ts = ((ops.start_ts[order] + epoch) * 1e6).tolist()
    durs = (ops.duration[order] * 1e6).tolist()
    lanes = {m: _LANES.get(m, _OTHER_LANE) for m in OPTYPES}
    events: list[dict[str, Any]] = [
        {
            "name": m,
            "cat": m,
            "ph": "X",
            "pid": d,
            "tid": r * 10 + lanes[m][0],
            "ts": t,
            "dur": u,
            "args": {"rank": r, "step": s, "tp": 0, "pp": p},
        }
        for m, r, d, s, p, t, u in zip(metrics, ranks, dps, steps, stages, ts, durs, strict=True)
    ]
    tids: dict[int, tuple[int, str]] = {}
    for m, r, d in set(zip(metrics, ranks, dps, strict=True)):
        lane, lane_name = lanes[m]
        tids[r * 10 + lane] = (d, f"rank[{r}] {lane_name}")
    n = len(events)
    for tid, (dp, name) in sorted(tids.items()):
        events.append({"name": "thread_name", "ph": "M", "pid": dp, "tid": tid, "args": {"name": name}})
        events.append(
            {"name": "thread_sort_index", "ph": "M", "pid": dp, "tid": tid, "args": {"sort_index": tid}}
        )
    for dp in sorted({d for d, _ in tids.values()}):
        events.append({"name": "process_name", "ph": "M", "pid": dp, "args": {"name": f"dp rank[{dp}]"}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": dp, "args": {"sort_index": dp}})
    with _open_out(Path(path)) as fh:
        fh.write(json.dumps(events))
    return n
