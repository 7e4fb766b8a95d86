"""A catalogue of hostile and careless uploads, one per class of issue 19 (shared by the tests).

Each case is (name, files as [(filename, bytes)], query, allowed statuses, words the error must
hold). Built from real formats: the native JSON Lines, the artifact CSV / parquet, Kineto JSON.
"""

from __future__ import annotations

import gzip
import io
import json
from dataclasses import dataclass, field
from typing import Any

OPS = ("dp_rank", "stage", "rank", "step", "optype", "start_ts", "duration")


def native(job: dict[str, Any] | str, ops: list[dict[str, Any]]) -> bytes:
    """A native JSON Lines file: the job line (or a raw first line) and the op lines."""
    first = job if isinstance(job, str) else json.dumps({"job": job})
    return ("\n".join([first, *(json.dumps(o) for o in ops)]) + "\n").encode()


def op(
    stage: int, step: int, optype: str, start: float, dur: float, seq: int = 0, **kw: Any
) -> dict[str, Any]:
    return {
        "dp_rank": 0,
        "stage": stage,
        "rank": stage,
        "step": step,
        "optype": optype,
        "start_ts": start,
        "duration": dur,
        "seq_id": seq,
        **kw,
    }


def two_stage(recv_first: bool = False, p2p: bool = True) -> bytes:
    """A 1 x 2 pipeline, two steps of one microbatch. ``recv_first`` puts every recv before its
    send (a causality violation); ``p2p=False`` drops the sends and recvs."""
    ops = []
    for step in range(2):
        t = step * 1.0
        fs, fr = (t + 0.10, t + 0.02) if recv_first else (t + 0.10, t + 0.11)
        bs, br = (t + 0.40, t + 0.30) if recv_first else (t + 0.40, t + 0.41)
        ops += [op(0, step, "forward-compute", t, 0.1)]
        ops += [
            op(1, step, "forward-compute", t + 0.12, 0.1),
            op(1, step, "backward-compute", t + 0.22, 0.18),
        ]
        ops += [op(0, step, "backward-compute", t + 0.42, 0.18)]
        if p2p:
            ops += [
                op(0, step, "forward-send", fs, 0.01),
                op(1, step, "forward-recv", fr, 0.01),
                op(1, step, "backward-send", bs, 0.01),
                op(0, step, "backward-recv", br, 0.01),
            ]
    return native({"dp_size": 1, "pp_size": 2, "trial_name": "two"}, ops)


def one_worker(**override: Any) -> bytes:
    """A 1 x 1 native trace of two steps, with ``override`` applied to the first op."""
    ops = [
        op(0, s, t, s + d0, 0.1)
        for s in range(2)
        for t, d0 in (("forward-compute", 0.0), ("backward-compute", 0.2))
    ]
    ops[0].update(override)
    return native({"dp_size": 1, "pp_size": 1}, ops)


def csv(rows: list[str], header: str = ",".join(OPS)) -> bytes:
    return ("\n".join([header, *rows]) + "\n").encode()


def parquet(columns: dict[str, Any]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(pa.table(columns), buf)
    return buf.getvalue()


def kineto(dinfo: Any) -> bytes:
    doc = {
        "schemaVersion": 1,
        "distributedInfo": dinfo,
        "traceEvents": [
            {
                "ph": "X",
                "name": "ProfilerStep#1",
                "cat": "user_annotation",
                "ts": 0,
                "dur": 100,
                "pid": 0,
                "tid": 0,
            }
        ],
    }
    return json.dumps(doc).encode()


@dataclass
class Case:
    name: str
    files: list[tuple[str, bytes]]
    query: dict[str, str] = field(default_factory=dict)
    status: tuple[int, ...] = (422,)
    words: tuple[str, ...] = ()
    absent: tuple[str, ...] = ()


GOOD_ROW = "0,0,0,0,forward-compute,0.0,0.1"


def cases() -> list[Case]:
    deep = "[" * 200_000 + "]" * 200_000
    meta_ok = b"dp_size: 1\npp_size: 1\n"
    inner = gzip.compress(one_worker())
    return [
        Case(
            "json nesting (native job line)",
            [("t.jsonl", ('{"job": ' + deep + "}\n").encode())],
            status=(422,),
            words=("t.jsonl",),
        ),
        Case(
            "json nesting (kineto)",
            [("rank0.json", ('{"traceEvents": ' + deep + "}").encode())],
            words=("nested too deeply", "rank0.json"),
        ),
        Case(
            "yaml nesting",
            [("t.jsonl", one_worker()), ("meta.yaml", b"dp_size: " + b"[" * 50_000)],
            status=(413, 422),
            words=("meta.yaml",),
        ),
        Case(
            "yaml alias bomb",
            [
                ("t.jsonl", one_worker()),
                ("meta.yaml", b'a: &a ["x","x"]\nb: &b [*a,*a]\nc: &c [*b,*b]\nd: [*c,*c]\n'),
            ],
            words=("anchor or alias", "meta.yaml"),
        ),
        Case(
            "int too large in meta",
            [("t.jsonl", one_worker()), ("meta.yaml", b"dp_size: 99999999999999999999999\n")],
            words=("dp_size", "meta.yaml"),
        ),
        Case(
            "int too large in the job line",
            [("t.jsonl", native({"dp_size": 10**30}, [op(0, 0, "forward-compute", 0, 1)]))],
            words=("dp_size",),
            absent=("meta.yaml",),
        ),
        Case(
            "int too large in a query parameter",
            [("t.jsonl", one_worker())],
            {"dp": "9" * 40},
            status=(400,),
            words=("dp=",),
        ),
        Case(
            "int too large in an id column (jsonl)",
            [("t.jsonl", one_worker(rank=10**30))],
            words=("t.jsonl",),
        ),
        Case(
            "int too large in an id column (csv)",
            [("t.csv", csv(["0,0,1e30,0,forward-compute,0.0,0.1"]))],
            words=("rank", "too large"),
        ),
        Case("distributedInfo not an object", [("rank0.json", kineto("oops"))], words=("distributedInfo",)),
        Case(
            "distributedInfo.rank a string",
            [("rank0.json", kineto({"rank": "3", "world_size": 1}))],
            words=("distributedInfo.rank",),
        ),
        Case(
            "pg_config not a list",
            [("rank0.json", kineto({"rank": 0, "pg_config": 7}))],
            words=("pg_config",),
        ),
        Case(
            "pg_config ranks null",
            [("rank0.json", kineto({"rank": 0, "pg_config": [{"ranks": None}]}))],
            status=(201, 422),
        ),
        Case(
            "pg_config ranks of strings",
            [("rank0.json", kineto({"rank": 0, "pg_config": [{"ranks": ["a"]}]}))],
            words=("ranks",),
        ),
        Case(
            "invalid utf-8 (csv)",
            [("t.csv", csv(["0,0,0,0,forw\xffard,0.0,0.1"]).replace(b"\xc3\xbf", b"\xff"))],
            words=("t.csv",),
        ),
        Case(
            "invalid utf-8 (kineto)",
            # in a field the reader decodes (an event name): keys it never reads are skipped unparsed
            [("rank0.json", b'{"traceEvents": [{"ph": "X", "name": "a\xff\xfe"}]}')],
            words=("UTF-8",),
        ),
        Case(
            "invalid utf-8 (meta)",
            [("t.jsonl", one_worker()), ("meta.yaml", b"dp_size: \xff\n")],
            words=("meta.yaml",),
        ),
        Case(
            "binary optype (parquet)",
            [("t.parquet", parquet({**_cols(), "optype": [b"\x00\x01"] * 2}))],
            words=("optype", "not op names"),
        ),
        Case(
            "nested optype (parquet)",
            [("t.parquet", parquet({**_cols(), "optype": [["a"], ["b"]]}))],
            words=("optype",),
        ),
        Case(
            "boolean stage (parquet)",
            [("t.parquet", parquet({**_cols(), "stage": [False, False]}))],
            words=("booleans",),
        ),
        Case(
            "boolean stage (csv)",
            [("t.csv", csv(["0,false,0,0,forward-compute,0.0,0.1"]))],
            words=("booleans",),
        ),
        Case(
            "corrupt inner gzip", [("t.jsonl.gz", gzip.compress(inner[: len(inner) // 2]))], words=("gzip",)
        ),
        Case(
            "garbage inner gzip",
            [("t.jsonl.gz", gzip.compress(b"\x1f\x8b\x08\x00" + b"\x00" * 64))],
            status=(422,),
        ),
        Case(
            "timestamps that overflow",
            [("t.jsonl", one_worker(start_ts=1e300))],
            words=("start_ts", "overflow"),
        ),
        Case(
            "dp far beyond the rows",
            [("t.jsonl", one_worker())],
            {"dp": "50000", "pp": "50000"},
            status=(413, 422),
            words=("workers",),
        ),
        Case("pipeline without p2p", [("t.jsonl", two_stage(p2p=False))], words=("point-to-point",)),
        Case(
            "problem in the trace, meta present",
            [("t.jsonl", one_worker(duration=-1.0)), ("meta.yaml", meta_ok)],
            words=("negative duration", "t.jsonl"),
            absent=("meta.yaml",),
        ),
    ]


def _cols() -> dict[str, Any]:
    return {
        "dp_rank": [0, 0],
        "stage": [0, 0],
        "rank": [0, 0],
        "step": [0, 1],
        "optype": ["forward-compute", "forward-compute"],
        "start_ts": [0.0, 1.0],
        "duration": [0.1, 0.1],
    }
