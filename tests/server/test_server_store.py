"""The store: dedup by content, atomic commits, crash recovery, results that survive a restart.

Every test runs on both implementations: SQLite in the data folder and PostgreSQL (a real
throwaway server, ``tests/conftest.py``) with the same folder as its shared trace folder.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from server.core.errors import ApiError
from server.core.service import Lens
from server.core.settings import Settings
from server.core.staging import UploadBudget, content_hash, write_bytes
from server.core.store import MIGRATIONS, SCHEMA_VERSION, PostgresStore, Store, TraceStore


@pytest.fixture(params=["sqlite", "postgresql"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], TraceStore]:
    """Opens a store of the test's kind on ``tmp_path`` (a PostgreSQL one on a fresh database,
    the same database on every call: a restart)."""
    if request.param == "sqlite":
        return lambda: Store(tmp_path).open()
    dsn = request.getfixturevalue("pg_dsn")
    return lambda: PostgresStore(tmp_path, dsn, replica="r1").open()


@pytest.fixture
def store(make_store: Callable[[], TraceStore]) -> Iterator[TraceStore]:
    """An open store in a fresh data folder, closed after the test."""
    opened = make_store()
    yield opened
    opened.close()


@pytest.fixture
def st_lens(tmp_path: Path, store: TraceStore, st_files: list[Path]) -> tuple[Lens, str]:
    """A service over ``store`` holding the ST sample, and the sample's trace id."""
    lens = Lens(Settings(data_dir=tmp_path), store)
    folder, files = stage(store, {p.name: p.read_bytes() for p in st_files})
    return lens, lens.ingest(folder, files, {}, "ST").trace_id


def stage(store: TraceStore, files: dict[str, bytes]) -> tuple[Path, list]:
    folder = store.staging_dir()
    budget = UploadBudget(10**9, 10**9)
    return folder, [write_bytes(folder, name, data, budget) for name, data in files.items()]


def test_same_content_answers_the_stored_record(tmp_path: Path, store: TraceStore) -> None:
    folder, files = stage(store, {"a.jsonl": b"1\n"})
    h = content_hash(files, {})
    rec, created = store.commit_trace(
        folder, content_hash=h, name="a", files=["a.jsonl"], options={}, summary={}
    )
    assert created and re.fullmatch(r"[0-9a-f]{32}", rec.id)
    folder2, files2 = stage(store, {"a.jsonl": b"1\n"})
    assert content_hash(files2, {}) == h
    twin, created2 = store.commit_trace(
        folder2, content_hash=h, name="a", files=["a.jsonl"], options={}, summary={}
    )
    assert not created2 and twin.id == rec.id
    assert not folder2.exists(), "the duplicate's staging folder is removed"
    assert content_hash(files2, {"dp": 2}) != h, "other read options make another trace"


def test_trace_ids_are_random_and_unguessable_strings_are_unknown(tmp_path: Path, store: TraceStore) -> None:
    ids = set()
    for i in range(5):
        folder, files = stage(store, {"a.jsonl": str(i).encode()})
        rec, _ = store.commit_trace(
            folder, content_hash=content_hash(files, {}), name="a", files=["a.jsonl"], options={}, summary={}
        )
        ids.add(rec.id)
    assert len(ids) == 5
    assert store.get("../../etc/passwd") is None
    assert store.get("0" * 32) is None


def test_open_removes_half_written_uploads_and_orphan_folders(
    tmp_path: Path, store: TraceStore, make_store: Callable[[], TraceStore]
) -> None:
    folder, _ = stage(store, {"a.jsonl": b"partial"})  # an upload killed mid-way
    orphan = store.traces_dir / ("f" * 32)  # renamed into place, but the row never written
    orphan.mkdir()
    (orphan / "x").write_bytes(b"x")
    if isinstance(store, PostgresStore):  # shared folder: only orphans older than an hour go
        young = store.traces_dir / ("e" * 32)  # another replica between its rename and its insert
        young.mkdir()
        os.utime(orphan, (0, 0))
    store.close()
    reopened = make_store()
    if isinstance(store, PostgresStore):
        assert young.is_dir()
    assert not folder.exists() and not orphan.exists()
    assert reopened.page(10, 0) == (0, [])
    reopened.close()


def test_results_survive_a_restart(
    tmp_path: Path, store: TraceStore, make_store: Callable[[], TraceStore]
) -> None:
    folder, files = stage(store, {"a.jsonl": b"1"})
    rec, _ = store.commit_trace(
        folder, content_hash=content_hash(files, {}), name="a", files=["a.jsonl"], options={}, summary={}
    )
    store.put_result(rec.id, "whatif", "", '{"s": 1.5}')
    store.close()
    again = make_store()
    assert again.get_result(rec.id, "whatif") == '{"s": 1.5}'
    assert again.cached_kinds(rec.id) == {"whatif"}
    assert (again.traces_dir / rec.id / "a.jsonl").read_bytes() == b"1"
    again.close()


def test_a_rejected_trace_leaves_nothing_behind(tmp_path: Path, store: TraceStore) -> None:
    lens = Lens(Settings(data_dir=tmp_path), store)
    folder, files = stage(store, {"x.csv": b"garbage,1\n2,3\n"})
    with pytest.raises(ApiError) as err:
        lens.ingest(folder, files, {}, "x")
    assert err.value.status == 422 and "x.csv" in err.value.message
    assert str(tmp_path) not in err.value.message, "server folders are not leaked"
    assert list(store.tmp_dir.iterdir()) == [] and list(store.traces_dir.iterdir()) == []
    assert store.db.read("SELECT COUNT(*) AS n FROM traces")[0]["n"] == 0


def test_ingest_parses_stores_and_reloads_the_st_sample(
    tmp_path: Path, store: TraceStore, st_files: list[Path]
) -> None:
    lens = Lens(Settings(data_dir=tmp_path), store)
    folder, files = stage(store, {p.name: p.read_bytes() for p in st_files})
    result = lens.ingest(folder, files, {}, "ST")
    assert result.created
    s = result.summary
    assert (s.format, s.job.dp, s.job.pp, s.job.workers) == ("artifact", 2, 4, 8)
    assert s.n_ops > 0 and s.n_steps == len(s.steps) > 0
    fresh = Lens(Settings(data_dir=tmp_path), store)  # empty trace cache: reads the folder again
    trace = fresh.trace(fresh.record(result.trace_id))
    assert len(trace.ops) == s.n_ops and trace.meta.pp == 4


def test_a_stored_scenario_never_answers_a_selector_the_job_cannot_have(
    tmp_path: Path, store: TraceStore, st_lens: tuple[Lens, str]
) -> None:
    lens, tid = st_lens
    good = lens.scenario(tid, pp_ranks=[3])
    assert good.speedup > 1.1
    # a result stored for an out-of-range selector (as an older server did) is not served
    selector = {"pp_ranks": [9]}
    store.put_result(tid, "scenario", json.dumps(selector, sort_keys=True), good.model_dump_json())
    for fresh in (lens, Lens(Settings(data_dir=tmp_path), store)):
        with pytest.raises(ApiError) as err:
            fresh.scenario(tid, **selector)
        assert err.value.status == 400 and "pp_ranks [9] outside the job" in err.value.message


def test_per_result_locks_do_not_outlive_their_callers(st_lens: tuple[Lens, str]) -> None:
    lens, tid = st_lens
    for stage_id in range(4):
        lens.scenario(tid, pp_ranks=[stage_id])
    # every distinct selector took its own lock; none is kept once its computation is done
    assert len(lens._locks) == 0


def test_step_heatmap_is_the_asked_step_and_unknown_steps_are_named(st_lens: tuple[Lens, str]) -> None:
    lens, tid = st_lens
    steps = lens.whatif(tid).steps
    png, hm, grid = lens.heatmap(tid, steps[-1])
    assert f"step {steps[-1]}" in grid
    assert png.startswith(b"\x89PNG") and hm.step == steps[-1] and hm.variant == "step-estimate"
    with pytest.raises(ApiError) as err:
        lens.heatmap(tid, max(steps) + 1000)
    assert err.value.code == "bad_step" and str(steps[0]) in err.value.message


def test_an_analysis_error_names_the_uploaded_file_not_server_folders(
    tmp_path: Path, store: TraceStore
) -> None:
    # step 1 lacks the backward: the reader accepts it, the engine's graph does not
    header = {"format": "straggler-lens/native", "version": 1, "job": {"dp_size": 1, "pp_size": 1}}
    rows = [
        {
            "dp_rank": 0,
            "stage": 0,
            "rank": 0,
            "step": step,
            "optype": optype,
            "start_ts": step + start,
            "duration": 0.01,
            "seq_id": 0,
            "mc": 0,
            "gmc": 0,
            "mb_id": 0,
        }
        for step, optype, start in (
            (0, "forward-compute", 0.0),
            (0, "backward-compute", 0.02),
            (1, "forward-compute", 0.0),
        )
    ]
    data = "\n".join(json.dumps(r) for r in [header, *rows]).encode()
    uploader = Lens(Settings(data_dir=tmp_path), store)
    folder, files = stage(store, {"trace.jsonl": data})
    tid = uploader.ingest(folder, files, {}, "gap").trace_id
    # the uploading server keeps the parsed trace; a fresh one re-reads the stored files
    for lens in (uploader, Lens(Settings(data_dir=tmp_path), store)):
        with pytest.raises(ApiError) as err:
            lens.whatif(tid)
        assert err.value.status == 422 and "every step must carry the same ops" in err.value.message
        assert "file=trace.jsonl" in err.value.message and str(tmp_path) not in err.value.message


def test_each_replica_stages_in_its_own_folder_and_cleans_only_that(tmp_path: Path, pg_dsn: str) -> None:
    a = PostgresStore(tmp_path, pg_dsn, replica="a").open()
    b = PostgresStore(tmp_path, pg_dsn, replica="b").open()
    sa, sb = a.staging_dir(), b.staging_dir()
    assert sa.parent != sb.parent
    b.close()
    again = PostgresStore(tmp_path, pg_dsn, replica="b").open()  # b restarts: a's upload in flight stays
    assert sa.is_dir() and not sb.exists()
    folder, files = stage(a, {"a.jsonl": b"1"})
    rec, _ = a.commit_trace(
        folder, content_hash=content_hash(files, {}), name="a", files=["a.jsonl"], options={}, summary={}
    )
    assert again.get(rec.id) == rec, "replicas share one database and one trace folder"
    a.close()
    again.close()


def test_an_old_sqlite_store_upgrades_on_start(tmp_path: Path) -> None:
    # a data folder written before schema versions: only the version-1 tables, no version table
    tid = "ab" * 16
    old = sqlite3.connect(tmp_path / "lens.sqlite3")
    old.executescript(MIGRATIONS[0][1])
    old.execute("INSERT INTO traces VALUES (?, 'h', 'n', 't', 1, '[]', '{}', '{}')", (tid,))
    old.commit()
    old.close()
    (tmp_path / "traces" / tid).mkdir(parents=True)
    store = Store(tmp_path).open()
    assert store.schema_version() == SCHEMA_VERSION >= 2
    assert store.get(tid) is not None, "rows written before the upgrade stay"
    assert store.db.read("SELECT COUNT(*) AS n FROM windows")[0]["n"] == 0, "the service tables exist now"
    store.close()
    assert Store(tmp_path).open().schema_version() == SCHEMA_VERSION  # a second start applies nothing


def test_replicas_starting_together_apply_each_migration_once(tmp_path: Path, pg_dsn: str) -> None:
    stores = [PostgresStore(tmp_path, pg_dsn, replica=f"r{i}") for i in range(2)]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda s: s.open(), stores))
    rows = stores[0].db.read("SELECT version FROM schema_version ORDER BY version")
    assert [r["version"] for r in rows] == [v for v, _ in MIGRATIONS]
    for s in stores:
        s.close()
