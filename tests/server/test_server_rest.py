"""The REST surface over a real socket with httpx: uploads, listing, error shape, OpenAPI."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import httpx
import pytest
from lens_testing import Live, native_jsonl


@pytest.fixture(scope="module")
def http(live: Live) -> httpx.Client:
    with httpx.Client(base_url=live.url, timeout=60) as client:
        yield client


def test_healthz_counts_the_preloaded_sample(http: httpx.Client) -> None:
    r = http.get("/healthz")
    assert r.status_code == 200
    assert r.json()["status"] == "ok" and r.json()["traces"] >= 1


def test_multipart_upload_of_st_answers_201_then_200_with_the_same_id(
    http: httpx.Client, st_files: list[Path], tmp_path: Path
) -> None:
    # the preloaded sample has the same bytes: a multipart upload of ST finds it
    files = [("files", (p.name, p.read_bytes())) for p in st_files]
    r = http.post("/api/traces", files=files)
    assert r.status_code == 200, r.text
    first = r.json()
    assert first["summary"]["job"]["pp"] == 4 and first["summary"]["format"] == "artifact"
    # a gzipped copy with an override is new content: 201, and parsed with the override
    gz = [("files", (st_files[0].name + ".gz", gzip.compress(st_files[0].read_bytes())))]
    r = http.post("/api/traces", files=gz, params={"dp": 2, "pp": 4})
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["trace_id"] != first["trace_id"]
    assert body["summary"]["files"] == [st_files[0].name], "the .gz suffix is dropped once inflated"
    r2 = http.post("/api/traces", files=gz, params={"dp": 2, "pp": 4})
    assert (r2.status_code, r2.json()["trace_id"]) == (200, body["trace_id"])


def test_raw_body_upload_with_query_options(http: httpx.Client) -> None:
    r = http.post(
        "/api/traces", params={"filename": "job.jsonl", "format": "native"}, content=native_jsonl(3, "raw")
    )
    assert r.status_code in (200, 201), r.text
    tid = r.json()["trace_id"]
    info = http.get(f"/api/traces/{tid}").json()
    assert info["trace_id"] == tid and info["summary"]["n_steps"] == 3
    assert info["summary"]["format"] == "native"


def test_listing_is_paginated_with_total_and_truncated(http: httpx.Client) -> None:
    for i in range(3):
        http.post("/api/traces", params={"filename": f"p{i}.jsonl"}, content=native_jsonl(2, f"page{i}"))
    full = http.get("/api/traces", params={"limit": 100}).json()
    assert full["total"] >= 4 and not full["truncated"]
    one = http.get("/api/traces", params={"limit": 1, "offset": 1}).json()
    assert one["truncated"] and len(one["items"]) == 1
    assert one["items"][0]["trace_id"] == full["items"][1]["trace_id"]
    bad = http.get("/api/traces", params={"limit": 1000})
    assert bad.status_code == 400 and "limit" in bad.json()["error"]["message"]


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status", "code"),
    [
        ("GET", "/api/traces/0123", {}, 404, "not_found"),
        ("GET", "/api/nothing-here", {}, 404, "not_found"),
        ("DELETE", "/api/traces", {}, 405, "method_not_allowed"),
        ("POST", "/api/traces?filename=x.csv", {"content": b"garbage,1\n2,3\n"}, 422, "trace_invalid"),
        ("POST", "/api/traces?dp=zero", {"content": b"x"}, 400, "bad_parameter"),
        ("POST", "/api/traces?color=red", {"content": b"x"}, 400, "bad_parameter"),
        ("POST", "/api/traces", {"files": [("other", ("a.jsonl", b"x"))]}, 400, "bad_part_name"),
        ("POST", "/api/traces", {"content": b""}, 400, "empty_file"),
        ("POST", "/api/traces?filename=a.gz", {"content": b"\x1f\x8bnot gzip at all"}, 400, "bad_gzip"),
    ],
)
def test_every_error_has_the_one_json_shape(
    http: httpx.Client, method: str, path: str, kwargs: dict, status: int, code: str
) -> None:
    r = http.request(method, path, **kwargs)
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"status", "code", "message"}
    assert body["error"]["status"] == status and body["error"]["code"] == code
    assert body["error"]["message"]


def test_a_malformed_trace_names_the_file_and_keeps_the_store(http: httpx.Client) -> None:
    before = http.get("/api/traces", params={"limit": 100}).json()["total"]
    bad = native_jsonl(2).replace(b'"duration": 0.02', b'"duration": -5.0')
    r = http.post("/api/traces", params={"filename": "broken.jsonl", "format": "native"}, content=bad)
    assert r.status_code == 422, r.text
    msg = r.json()["error"]["message"]
    assert "broken.jsonl" in msg and "/tmp" not in msg
    assert http.get("/api/traces", params={"limit": 100}).json()["total"] == before
    assert http.get("/healthz").status_code == 200


def test_openapi_document_lists_the_routes_and_models(http: httpx.Client) -> None:
    doc = http.get("/api/openapi.json").json()
    assert doc["openapi"].startswith("3.")
    for path in (
        "/api/traces",
        "/api/traces/{trace_id}",
        "/api/traces/{trace_id}/whatif",
        "/api/traces/{trace_id}/diagnosis",
        "/api/traces/{trace_id}/heatmap.png",
    ):
        assert path in doc["paths"]
    assert {"ErrorBody", "UploadResult", "TraceList"} <= set(doc["components"]["schemas"])


def test_a_multipart_upload_streams_several_files_and_reads_the_meta(
    http: httpx.Client, st_files: list[Path]
) -> None:
    # CSV copy of ST: same ops, another file format, so another content hash
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pacsv.write_csv(pq.read_table(st_files[0]), buf)
    files = [
        ("files", ("trace-ST.csv", buf.getvalue())),
        ("files", ("meta-ST.yaml", st_files[1].read_bytes())),
    ]
    r = http.post("/api/traces", files=files)
    assert r.status_code == 201, r.text
    s = r.json()["summary"]
    assert (
        s["job"]["dp"] == 2 and s["job"]["pp"] == 4 and sorted(s["files"]) == ["meta-ST.yaml", "trace-ST.csv"]
    )


def test_an_upload_with_a_readme_part_skips_it_and_says_so(
    http: httpx.Client, st_files: list[Path]
) -> None:
    files = [("files", (p.name, p.read_bytes())) for p in st_files]
    files.append(("files", ("README.md", b"# recorded on cluster A, job 42\n")))
    r = http.post("/api/traces", files=files)
    assert r.status_code == 201, r.text
    summary = r.json()["summary"]
    assert summary["job"]["trial_name"] == "ST" and summary["n_ops"] == 6784
    assert any("README.md" in n for n in summary["notes"])


def test_a_bad_meta_upload_gets_one_line_and_keeps_the_store(
    http: httpx.Client, st_files: list[Path]
) -> None:
    before = http.get("/api/traces", params={"limit": 100}).json()["total"]
    for meta, expect in (
        (b"dp_size: 0\npp_size: 4\n", "bad job metadata: dp: Input should be greater than or equal to 1"),
        (b"dp_size: 2\npp_szie: 4\n", "unknown meta key(s) pp_szie (did you mean pp_size?)"),
    ):
        files = [("files", (st_files[0].name, st_files[0].read_bytes())), ("files", ("meta.yaml", meta))]
        r = http.post("/api/traces", files=files)
        assert r.status_code == 422, r.text
        msg = r.json()["error"]["message"]
        assert expect in msg and "(file=meta.yaml)" in msg and "\n" not in msg
    assert http.get("/api/traces", params={"limit": 100}).json()["total"] == before
