"""The fleet study on a real local Ray: a small labelled fleet, one job over its memory limit and one
whose trace is corrupt, a rerun that skips what is done, and the CLI over a CSV manifest.

One Ray session for the module (start-up ~4 s, ~700 MiB), shut down after.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

pytest.importorskip("ray")

from diagnosers.fleet import COLUMN_NAMES, read_table
from diagnosers.synth.fleet import fleet_specs, read_manifest_labels, truth, write_fleet
from diagnosers.synth.spec import Scenario, ScenarioSpec
from diagnosers.writers import write_meta_yaml, write_parquet
from server.core.fleet import resolve_sources
from server.core.fleet_ray import run_fleet, start_local_ray

N_JOBS = 12
PP = 3 / 100  # the done-when tolerance: ±3 percentage points


@pytest.fixture(scope="module")
def ray_session(tmp_path_factory):
    ray = start_local_ray(2, temp_dir=str(tmp_path_factory.mktemp("ray")))
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> dict:
    """A labelled fleet plus two bad jobs appended to its manifest."""
    root = tmp_path_factory.mktemp("fleet")
    manifest = write_fleet(root, fleet_specs(N_JOBS, seed=7, max_workers=8))
    labelled = read_manifest_labels(manifest)
    # a job whose analysis needs more than its 8 MiB limit (dp 32 x pp 8, ~40k ops)
    from diagnosers.synth import generate

    big = generate(ScenarioSpec(dp=32, pp=8, microbatches=8, steps=2, scenarios=[Scenario.NONE], seed=3))
    write_parquet(big.trace, root / "big" / "trace.parquet")
    write_meta_yaml(big.trace.meta, root / "big" / "meta.yaml")
    (root / "corrupt").mkdir()
    (root / "corrupt" / "trace.parquet").write_bytes(b"PAR1 this is not a parquet file")
    extra = [
        {"job_id": "over-memory", "paths": ["big/trace.parquet"], "meta": "big/meta.yaml", "memory_mb": 8},
        {"job_id": "corrupt", "paths": ["corrupt"], "gpus": 64, "duration_hours": 2.0},
    ]
    with manifest.open("a", encoding="utf-8") as fh:
        fh.writelines(json.dumps(e) + "\n" for e in extra)
    return {"root": root, "manifest": manifest, "labelled": labelled}


def test_fleet_statistics_match_the_labels_and_bad_jobs_fail_alone(ray_session, fleet, tmp_path) -> None:
    jobs = resolve_sources([str(fleet["manifest"])])
    lines: list[str] = []
    out = run_fleet(jobs, tmp_path / "out", workers=2, timeout_s=120, memory_mb=2048, progress=lines.append)
    report = out["report"]
    want = truth(fleet["labelled"])

    assert report.counts["jobs"] == N_JOBS + 2
    assert report.counts["analysed"] == N_JOBS and report.counts["failed"] == 2
    assert "memory limit exceeded" in report.failures["over-memory"]
    assert "TraceError" in report.failures["corrupt"] and "parquet" in report.failures["corrupt"]
    assert report.counts["unreliable"] == 0  # generated traces are simulated exactly

    assert report.straggling_share == pytest.approx(want["straggling_share"], abs=PP)
    found = {m.cause: m.top_share for m in report.cause_mix}
    for cause, share in want["cause_mix"].items():
        assert found.get(cause, 0.0) == pytest.approx(share, abs=PP), cause
    assert set(found) <= set(want["cause_mix"])
    assert report.no_cause_share == pytest.approx(want["no_cause_share"], abs=PP)
    assert report.gpu_hours_wasted_share is not None  # beside the truth in bench/fleet_bench.py

    # progress: one line per job, and the outputs are on disk
    assert sum(1 for line in lines if line.startswith("[")) == N_JOBS + 2
    root = tmp_path / "out"
    for name in ("fleet.parquet", "report.json", "report.txt", "cdf.png", "causes.png", "size.png"):
        assert (root / name).stat().st_size > 0, name
    rows = {r["job_id"]: r for r in read_table(root / "fleet.parquet")}
    assert set(rows["job-00000"]) == set(COLUMN_NAMES) and len(rows) == N_JOBS + 2
    assert rows["corrupt"]["status"] == "failed" and rows["corrupt"]["slowdown"] is None
    assert rows["corrupt"]["gpus"] == 64
    ok = [r for r in rows.values() if r["status"] == "ok"]
    assert all(r["content_hash"] and r["m_w"] is not None and r["fidelity"] == "good" for r in ok)
    assert all(r["cause_1_gain"] is not None for r in ok if r["cause_1"])

    # a rerun skips every job analysed with the same content hash and retries the failed ones
    again = run_fleet(jobs, root, workers=2, timeout_s=120, memory_mb=2048)
    assert again["skipped"] == N_JOBS and again["analysed"] == 2
    assert again["report"].straggling_share == report.straggling_share


def test_cli_over_a_csv_manifest_with_a_timeout(ray_session, fleet, tmp_path, capsys) -> None:
    from server.cli import main

    labelled = fleet["labelled"][:2]
    manifest = tmp_path / "jobs.csv"
    with manifest.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["job_id", "paths", "meta", "gpus", "duration_hours", "team", "timeout_s"])
        for e in labelled:
            w.writerow([e["job_id"], str(fleet["root"] / e["paths"][0]), str(fleet["root"] / e["meta"]),
                        e["gpus"], e["duration_hours"], e["team"], ""])
        # a job that cannot finish in a millisecond
        e = fleet["labelled"][2]
        root = fleet["root"]
        w.writerow(["slow", str(root / e["paths"][0]), str(root / e["meta"]), 8, 1, "x", 0.001])
    rc = main(["fleet", str(manifest), "-o", str(tmp_path / "o"), "--workers", "2", "--json"])
    assert rc == 1  # one job failed; the report is written anyway
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["counts"] == {"jobs": 3, "analysed": 2, "failed": 1, "unreliable": 0, "reliable": 2}
    assert report["failures"]["slow"].startswith("timed out after 0.001 s")
    assert "[3/3]" in captured.err
    assert Path(tmp_path / "o" / "report.json").exists()


def test_bad_sources_are_refused_with_the_place(tmp_path) -> None:
    from server.core.fleet import FleetSourceError

    bad = tmp_path / "m.jsonl"
    bad.write_text('{"job_id": "a", "paths": ["x"]}\n{"job_id": "b", "paths": ["y"], "gpus": "many"}\n')
    with pytest.raises(FleetSourceError, match=r"m\.jsonl:2: gpus must be an integer"):
        resolve_sources([str(bad)])
    with pytest.raises(FleetSourceError, match="glob matched nothing"):
        resolve_sources([str(tmp_path / "nothing-*")])
    dup = tmp_path / "d.jsonl"
    dup.write_text('{"job_id": "a", "paths": ["x"]}\n{"job_id": "a", "paths": ["y"]}\n')
    with pytest.raises(FleetSourceError, match="appears twice"):
        resolve_sources([str(dup)])


def test_globs_and_folders_become_jobs_with_their_meta(fleet) -> None:
    root = fleet["root"]
    by_folder = resolve_sources([str(root / "jobs" / "job-0000[01]")])
    assert [j.job_id for j in by_folder] == ["job-00000", "job-00001"]
    assert by_folder[0].meta and by_folder[0].meta.endswith("meta.yaml")
    assert all(not p.endswith("labels.json") for j in by_folder for p in j.paths)
    by_file = resolve_sources([str(root / "jobs" / "job-0000[01]" / "trace.parquet")])
    assert [j.job_id for j in by_file] == ["job-00000/trace", "job-00001/trace"]
