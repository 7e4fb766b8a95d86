"""Readers and normalisation: the artifact schema in three encodings, the native format, the op-name
table and the validation errors (each names where the problem is)."""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from diagnosers.model import OPTYPE_CODE, OPTYPES, JobMeta, TraceError
from diagnosers.readers import ReadOptions, detect_format, load_trace
from diagnosers.readers.normalize import normalize
from diagnosers.samples import ARTIFACT_DIR

DATA = ARTIFACT_DIR
FIELDS = (
    "dp_rank",
    "stage",
    "rank",
    "step",
    "optype",
    "start_ts",
    "duration",
    "seq_id",
    "mc",
    "gmc",
    "mb_id",
)


def tiny_columns(dp: int = 2, steps: int = 2) -> dict[str, np.ndarray]:
    """A two-stage job with one microbatch: enough rows to exercise every validation rule."""
    rows: list[tuple[Any, ...]] = []
    for step in range(steps):
        for d in range(dp):
            for s in range(2):
                r = d * 2 + s
                ops = [
                    ("forward-compute", 0.0, 0.1),
                    ("backward-compute", 0.3, 0.2),
                    ("optimizer", 0.6, 0.05),
                ]
                ops.append(("forward-send", 0.1, 0.01) if s == 0 else ("forward-recv", 0.0, 0.11))
                ops.append(("backward-recv", 0.1, 0.4) if s == 0 else ("backward-send", 0.5, 0.01))
                rows += [(d, s, r, step, name, t, du) for name, t, du in ops]
    cols = list(zip(*rows, strict=True))
    return {
        "dp_rank": np.array(cols[0]),
        "stage": np.array(cols[1]),
        "rank": np.array(cols[2]),
        "step": np.array(cols[3]),
        "optype": np.array(cols[4], dtype=object),
        "start_ts": np.array(cols[5], dtype=float),
        "duration": np.array(cols[6], dtype=float),
    }


def test_parquet_reads_with_meta_beside_it() -> None:
    trace = load_trace([DATA / "trace-ST.parquet"])
    assert (trace.meta.dp, trace.meta.pp, trace.meta.world_size) == (2, 4, 8)
    assert len(trace.ops) == 6784
    assert trace.meta.source_format == "artifact"
    assert trace.steps[:3] == [23, 25, 33]


def _write_rows(trace_cols: dict[str, np.ndarray], n: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        row = {k: trace_cols[k][i].item() for k in FIELDS if k != "optype"}
        row["optype"] = OPTYPES[int(trace_cols["optype"][i])]
        out.append(row)
    return out


def test_csv_jsonl_gz_and_native_read_the_same_ops(tmp_path: Path) -> None:
    ref = load_trace([DATA / "trace-ST.parquet"])
    rows = _write_rows(ref.ops.columns(), 800)  # the first 800 ops: steps 23 (and part of 25)
    step23 = [r for r in rows if r["step"] == 23]
    csv_path = tmp_path / "t.csv"
    with open(csv_path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(FIELDS))
        w.writeheader()
        w.writerows(step23)
    jl_path = tmp_path / "t.jsonl.gz"
    with gzip.open(jl_path, "wt") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in step23)
    native_path = tmp_path / "t.native.jsonl"
    job = {
        "trial_name": "ST",
        "run_id": 0,
        "dp_size": 2,
        "dsp_size": 1,
        "pp_size": 4,
        "tp_size": 1,
        "vpp_size": 1,
        "world_size": 8,
        "gpus_per_host": 8,
    }
    with open(native_path, "w") as fh:
        fh.write(json.dumps({"job": job}) + "\n")
        fh.writelines(json.dumps(r) + "\n" for r in step23)
    meta = DATA / "meta-ST.yaml"
    assert detect_format([csv_path]) == "artifact"
    assert detect_format([jl_path]) == "artifact"
    assert detect_format([native_path]) == "native"
    a = load_trace([csv_path, meta])
    b = load_trace([jl_path], ReadOptions(meta_path=meta))
    c = load_trace([native_path])
    ref23 = ref.ops.take(ref.ops.step == 23)
    for t in (a, b, c):
        assert t.meta.dp == 2 and t.meta.pp == 4
        np.testing.assert_array_equal(t.ops.optype, ref23.optype)
        np.testing.assert_allclose(t.ops.start_ts, ref23.start_ts)
        np.testing.assert_array_equal(t.ops.seq_id, ref23.seq_id)
    assert c.meta.source_format == "native"


def test_command_line_keys_override_and_fill_meta(tmp_path: Path) -> None:
    cols = tiny_columns()
    path = tmp_path / "ops.jsonl"
    with open(path, "w") as fh:
        for i in range(len(cols["step"])):
            row = {k: (v[i].item() if hasattr(v[i], "item") else v[i]) for k, v in cols.items()}
            fh.write(json.dumps(row) + "\n")
    t = load_trace([path])
    assert (t.meta.dp, t.meta.pp) == (2, 2)
    assert any("no meta yaml" in n for n in t.notes)
    t2 = load_trace([path], ReadOptions(tp=4, gpus_per_host=4))
    assert t2.meta.tp == 4 and t2.meta.world_size == 16 and t2.meta.gpus_per_host == 4
    with pytest.raises(TraceError, match="outside the job's dp size"):
        load_trace([path], ReadOptions(dp=1))


def test_batched_p2p_is_split_and_seq_ids_rederived() -> None:
    cols = tiny_columns(dp=1, steps=1)
    # stage 0: fuse the forward-send with the backward-recv into one batched record
    opt = cols["optype"]
    fs = int(np.flatnonzero(opt == "forward-send")[0])
    br = int(np.flatnonzero(opt == "backward-recv")[0])
    keep = np.ones(len(opt), bool)
    keep[br] = False
    opt[fs] = "forward-send-backward-recv"
    cols = {k: v[keep] for k, v in cols.items()}
    t = normalize(cols, JobMeta(dp=1, pp=2), source="mem")
    ops = t.ops
    fs_rows = np.flatnonzero(ops.optype == OPTYPE_CODE["forward-send"])
    br_rows = np.flatnonzero(ops.optype == OPTYPE_CODE["backward-recv"])
    assert len(fs_rows) == len(br_rows) == 1
    assert ops.start_ts[fs_rows[0]] == ops.start_ts[br_rows[0]]
    assert ops.duration[fs_rows[0]] == ops.duration[br_rows[0]]
    assert any("split 1 batched" in n for n in t.notes)


def test_aliases_folded_and_ignored_names_are_noted() -> None:
    cols = tiny_columns(dp=1, steps=1)
    extra = {
        "dp_rank": [0, 0, 0, 0],
        "stage": [0, 0, 0, 0],
        "rank": [0, 0, 0, 0],
        "step": [0, 0, 0, 0],
        "optype": ["grads-all-reduce", "tp-allreduce", "train-step", "params-all-gather-nonoverlapping"],
        "start_ts": [0.55, 0.05, 0.0, 0.0],
        "duration": [0.01, 0.01, 0.7, 0.02],
    }
    both = {k: np.concatenate([cols[k], np.asarray(extra[k], dtype=cols[k].dtype)]) for k in cols}
    both["dp_rank"][-4:] = 0
    # the other stage needs the same grads slot so the DP-multiset check passes trivially (dp=1)
    t = normalize(both, JobMeta(dp=1, pp=2), source="mem")
    assert (t.ops.optype == OPTYPE_CODE["grads-reduce-scatter"]).sum() == 1
    text = " ".join(t.notes)
    assert "grads-all-reduce" in text and "tp-allreduce" in text and "train-step" in text
    assert "params-all-gather-nonoverlapping" in text
    assert len(t.ops) == len(cols["step"]) + 1


def test_parquet_category_list_may_name_unused_values(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols = tiny_columns()
    names = ["first-op", "bogus-unused", *sorted(set(cols["optype"]))]
    idx = np.array([names.index(n) for n in cols["optype"]], dtype=np.int8)
    arrays = {k: pa.array(v) for k, v in cols.items() if k != "optype"}
    arrays["optype"] = pa.DictionaryArray.from_arrays(pa.array(idx), pa.array(names))
    path = tmp_path / "trace-x.parquet"
    pq.write_table(pa.table(arrays), path)
    t = load_trace([path])
    assert len(t.ops) == len(cols["step"])


@pytest.mark.parametrize(
    ("mutate", "message", "where"),
    [
        (lambda c: c.pop("duration"), "missing columns: duration", {"file": "f.parquet"}),
        (
            lambda c: c["optype"].__setitem__(7, "mystery-op"),
            "unknown op type 'mystery-op'",
            {"rank": 1, "step": 0, "op": "mystery-op"},
        ),
        (
            lambda c: c["duration"].__setitem__(6, np.nan),
            "duration is nan",
            {"rank": 1, "step": 0, "op": "backward-compute"},
        ),
        (
            lambda c: c["duration"].__setitem__(12, -0.5),
            "negative duration",
            {"rank": 2, "step": 0, "op": "optimizer"},
        ),
        (
            lambda c: c["optype"].__setitem__(17, "backward-compute"),
            "differs across DP ranks",
            {"rank": 3, "step": 0},
        ),
        (lambda c: c["rank"].__setitem__(0, 7), "holds ops of ranks", {"rank": 0}),
    ],
)
def test_validation_errors_name_where(mutate: Any, message: str, where: dict[str, Any]) -> None:
    cols = tiny_columns()
    mutate(cols)
    with pytest.raises(TraceError, match=message) as info:
        normalize(cols, JobMeta(dp=2, pp=2), source="f.parquet")
    err = info.value
    assert err.file == "f.parquet"
    for key, value in where.items():
        assert getattr(err, key) == value, (key, str(err))


def test_p2p_without_peer_and_missing_worker() -> None:
    cols = tiny_columns(dp=1, steps=1)
    only0 = {k: v[cols["stage"] == 0] for k, v in cols.items()}
    with pytest.raises(TraceError, match="no peer") as info:
        normalize(only0, JobMeta(dp=1, pp=1), source="f")
    assert info.value.op == "forward-send" or info.value.op == "backward-recv"
    with pytest.raises(TraceError, match="no ops for worker dp_rank=0, stage=1"):
        normalize(only0, JobMeta(dp=1, pp=2), source="f")


def test_non_strict_names_drop_unknown_ops() -> None:
    cols = tiny_columns()
    cols["optype"][3] = "mystery"
    cols["optype"][13] = "mystery"
    t = normalize(cols, JobMeta(dp=2, pp=2), source="f", strict_names=False)
    assert any("unknown type 'mystery'" in n for n in t.notes)


def test_native_files_match_the_json_schema(tmp_path: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    from diagnosers.synth import demo_job
    from diagnosers.writers import write_native

    root = Path(__file__).resolve().parents[2]
    schema = json.loads((root / "docs" / "native-format.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    path = write_native(demo_job().trace, tmp_path / "demo.jsonl")
    lines = path.read_text().splitlines()
    assert "job" in json.loads(lines[0])
    for line in lines[:200]:
        validator.validate(json.loads(line))
    assert not validator.is_valid({"job": {"dp_size": 0}})
    assert not validator.is_valid(
        {"dp_rank": 0, "stage": 0, "rank": 0, "step": 0, "optype": "warp", "start_ts": 0, "duration": 1}
    )
    assert len(load_trace([path]).ops) == len(lines) - 1


def test_nulls_in_optional_columns_become_minus_one(tmp_path: Path) -> None:
    cols = tiny_columns(dp=1, steps=1)
    path = tmp_path / "ops.jsonl"
    with open(path, "w") as fh:
        for i in range(len(cols["step"])):
            row = {k: (v[i].item() if hasattr(v[i], "item") else v[i]) for k, v in cols.items()}
            row["mb_id"] = 0 if row["optype"].endswith("compute") else None
            fh.write(json.dumps(row) + "\n")
    t = load_trace([path])
    compute = np.isin(t.ops.optype, [OPTYPE_CODE["forward-compute"], OPTYPE_CODE["backward-compute"]])
    assert (t.ops.mb_id[compute] == 0).all() and (t.ops.mb_id[~compute] == -1).all()


def test_several_files_are_one_job(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    table = pq.read_table(DATA / "trace-ST.parquet")
    steps = np.asarray(table.column("step"))
    first = steps < 300
    pq.write_table(table.filter(first), tmp_path / "part-a.parquet")
    # the second part as gzipped CSV with optype as plain strings
    import pyarrow.csv as pcsv

    rest = table.filter(~first)
    rest = rest.set_column(
        rest.schema.get_field_index("optype"), "optype", rest.column("optype").cast("string")
    )
    pcsv.write_csv(rest, tmp_path / "part-b.csv")
    with open(tmp_path / "part-b.csv", "rb") as src, gzip.open(tmp_path / "part-b.csv.gz", "wb") as dst:
        dst.write(src.read())
    (tmp_path / "part-b.csv").unlink()
    with pytest.raises(TraceError, match=r"cannot tell|cannot parse"):
        load_trace([tmp_path / "part-a.parquet", tmp_path / "part-b.csv.gz"], ReadOptions(format="parquet"))
    whole = load_trace([tmp_path / "part-a.parquet", DATA / "meta-ST.yaml"])
    assert whole.steps == [s for s in load_trace([DATA / "trace-ST.parquet"]).steps if s < 300]
    both = load_trace(
        [tmp_path / "part-a.parquet", tmp_path / "part-b.csv.gz"],
        ReadOptions(meta_path=DATA / "meta-ST.yaml"),
    )
    ref = load_trace([DATA / "trace-ST.parquet"])
    np.testing.assert_array_equal(both.ops.optype, ref.ops.optype)
    np.testing.assert_allclose(both.ops.duration, ref.ops.duration)


def test_native_rows_may_leave_out_optional_fields(tmp_path: Path) -> None:
    cols = tiny_columns()
    path = tmp_path / "minimal.jsonl"
    with open(path, "w") as fh:
        fh.write(json.dumps({"job": {"dp_size": 2, "pp_size": 2}}) + "\n")
        for i in range(len(cols["step"])):
            fh.write(
                json.dumps({k: (v[i].item() if hasattr(v[i], "item") else v[i]) for k, v in cols.items()})
                + "\n"
            )
    t = load_trace([path])
    assert (
        t.ops.seq_id.max() == 0 and (t.ops.mb_id[t.ops.optype == OPTYPE_CODE["forward-compute"]] == 0).all()
    )
    bad = tmp_path / "no-duration.jsonl"
    with open(bad, "w") as fh:
        fh.write(json.dumps({"job": {"dp_size": 2, "pp_size": 2}}) + "\n")
        fh.write(
            json.dumps({"dp_rank": 0, "stage": 0, "rank": 0, "step": 0, "optype": "gc", "start_ts": 0.0})
            + "\n"
        )
    with pytest.raises(TraceError, match="missing columns: duration"):
        load_trace([bad])
