"""The ingestion client against real loopback receivers: retries, bounds, never raising."""

from __future__ import annotations

import gzip
import json
import logging
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from loopback import Receiver, Script

from server.ingest_client import LensReporter

ROOT = Path(__file__).resolve().parents[2]


class FakeProfiler:
    """What ``on_trace_ready`` uses of ``torch.profiler.profile``: ``step_num`` and the export."""

    def __init__(self, step_num: int):
        self.step_num = step_num

    def export_chrome_trace(self, path: str) -> None:
        with gzip.open(path, "wt") as fh:
            json.dump({"traceEvents": [], "distributedInfo": {"rank": 1, "world_size": 2}}, fh)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_upload_retries_until_the_server_answers(tmp_path: Path) -> None:
    with Receiver(Script(statuses=[503, 502, 201])) as rx:
        rep = LensReporter(
            rx.url,
            "job-a",
            rank=1,
            world_size=2,
            token="secret-token-123456",
            run="r1",
            out_dir=tmp_path,
            backoff=0.01,
        )
        rep.on_trace_ready(FakeProfiler(7))
        assert rep.close(10)
        reqs = rx.wait_for(3)
    assert [o.ok for o in rep.outcomes] == [True] and rep.outcomes[0].tries == 3
    last = reqs[-1]
    assert last.method == "PUT"
    assert last.path.startswith("/api/jobs/job-a/windows/r1-s7/ranks/1?")
    assert "world_size=2" in last.path and "filename=kineto_rank1.json.gz" in last.path
    assert last.headers["authorization"] == "Bearer secret-token-123456"
    assert json.loads(gzip.decompress(last.body))["distributedInfo"]["rank"] == 1
    assert (tmp_path / "job-a" / "r1-s7" / "kineto_rank1.json.gz").is_file()


def test_a_refusal_is_not_retried_and_only_warns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with Receiver(Script(statuses=[409])) as rx, caplog.at_level(logging.WARNING, "straggler_lens.client"):
        rep = LensReporter(rx.url, "job-a", rank=0, world_size=1, out_dir=tmp_path, backoff=0.01)
        rep.send_records(
            [{"metric": "forward-compute", "rank": 0, "step": 1, "start_ts": [1.0], "duration": [0.1]}],
            window="w1",
        )
        assert rep.close(10)
        assert len(rx.wait_for(1)) == 1
    assert rep.outcomes[0].status == 409 and rep.outcomes[0].tries == 1
    assert "format=ndtimeline" in rx.requests[0].path
    assert "upload of" in caplog.text and "stays there" in caplog.text
    rows = gzip.decompress((tmp_path / "job-a" / "w1" / "ndtimeline_rank0.jsonl.gz").read_bytes())
    assert json.loads(rows)["metric"] == "forward-compute"


def test_an_unreachable_server_gives_up_within_the_total_time(tmp_path: Path) -> None:
    rep = LensReporter(
        f"http://127.0.0.1:{free_port()}",
        "job-a",
        rank=0,
        world_size=1,
        out_dir=tmp_path,
        backoff=0.2,
        max_tries=50,
        total_timeout=1.0,
    )
    rep.on_trace_ready(FakeProfiler(3))  # returns at once: the upload runs on its own thread
    assert rep.close(5)
    (outcome,) = rep.outcomes
    assert not outcome.ok and outcome.status is None and 1 < outcome.tries < 50
    assert outcome.path.is_file()


def test_handlers_never_raise_into_the_training_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STRAGGLER_LENS_URL", raising=False)

    class Broken:
        step_num = 1

        def export_chrome_trace(self, path: str) -> None:
            raise RuntimeError("disk full")

    rep = LensReporter("http://127.0.0.1:9", "job-a", rank=0, out_dir=tmp_path)
    rep.on_trace_ready(Broken())
    rep.send_records([object()], window="w")  # not a record: a warning, no exception
    assert rep.close(1) and rep.outcomes == []
    off = LensReporter(None, "job-a", out_dir=tmp_path)  # no URL anywhere: reporting is off
    off.on_trace_ready(FakeProfiler(1))  # the trace is still written locally, nothing is sent
    assert not off.enabled and off.close(1) and off.outcomes == []
    assert (tmp_path / "job-a" / "s1" / "kineto_rank0.json.gz").is_file()


def test_the_client_imports_nothing_of_the_server() -> None:
    code = (
        "import sys, server.ingest_client as c; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'diagnosers', 'incidents', 'numpy', 'pydantic', 'starlette', 'yaml', 'mcp', 'torch'} "
        "or (m.startswith('server.') and m != 'server.ingest_client')); print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_url_token_and_run_come_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with Receiver(Script(statuses=[201])) as rx:
        monkeypatch.setenv("STRAGGLER_LENS_URL", rx.url)
        monkeypatch.setenv("STRAGGLER_LENS_TOKEN", "env-token-0123456789")
        monkeypatch.setenv("STRAGGLER_LENS_RUN", "run42")
        monkeypatch.setenv("RANK", "3")
        monkeypatch.setenv("WORLD_SIZE", "4")
        rep = LensReporter(job="job-e", out_dir=tmp_path)
        rep.on_trace_ready(FakeProfiler(9))
        assert rep.close(10)
        (req,) = rx.wait_for(1)
    assert req.path.startswith("/api/jobs/job-e/windows/run42-s9/ranks/3?") and "world_size=4" in req.path
    assert req.headers["authorization"] == "Bearer env-token-0123456789"
