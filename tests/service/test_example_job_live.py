"""The real example training job streams its windows live to a real server on loopback: the
server assembles, analyses and lists them per job, and compare_windows shows the fix (the slow
rank switched off in the second run) as before / after."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from loopback import Live, LiveServer, wait_for

from server.core.settings import Settings

pytest.importorskip(
    "torch", reason="the example job needs PyTorch: pip install -e '.[torch]' (torch==2.13.0, CPU)"
)

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "pp_dp_train.py"
TOKEN = "example-token-0123456789"


@pytest.fixture(scope="module")
def lens(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("lens"), token=TOKEN, poll_s=0.1)
    with LiveServer(settings) as live:
        yield live


def run_job(url: str, out: Path, *extra: str) -> None:
    cmd = [
        sys.executable,
        str(SCRIPT),
        "--dp",
        "2",
        "--pp",
        "2",
        "--steps",
        "4",
        "--microbatches",
        "2",
        "--hidden",
        "64",
        "--timeout",
        "60",
        "--out",
        str(out),
        "--report-to",
        url,
        "--job",
        "demo",
        *extra,
    ]
    env = dict(os.environ, PYTHONPATH=str(ROOT), STRAGGLER_LENS_TOKEN=TOKEN)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=420, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "upload of" not in done.stderr, done.stderr[-3000:]  # no failed upload warning


@pytest.mark.torch
@pytest.mark.slow
def test_example_job_posts_windows_live_and_compare_shows_the_fix(lens: Live, tmp_path: Path) -> None:
    h = {"Authorization": f"Bearer {TOKEN}"}

    def windows() -> list[dict]:
        return httpx.get(f"{lens.url}/api/jobs/demo", headers=h, timeout=30).json()["windows"]

    run_job(lens.url, tmp_path / "slow", "--slow-rank", "1", "--slow-ms", "40")
    wait_for(lambda: windows() and windows()[0]["status"] == "done", 180)
    run_job(lens.url, tmp_path / "fixed")
    wait_for(lambda: len(windows()) == 2 and all(w["status"] == "done" for w in windows()), 180)
    after, before = windows()
    assert before["ranks_received"] == after["ranks_received"] == 4 and before["world_size"] == 4
    assert before["window"].endswith("-s4") and before["window"] != after["window"]
    jobs = httpx.get(f"{lens.url}/api/jobs", headers=h).json()
    assert [j["job"] for j in jobs["jobs"]] == ["demo"] and jobs["jobs"][0]["windows"] == 2
    cmp = httpx.get(
        f"{lens.url}/api/jobs/demo/compare",
        params={"before": before["window"], "after": after["window"]},
        headers=h,
    ).json()
    assert cmp["slowdown_before"] > cmp["slowdown_after"] and cmp["improved"], cmp
    assert before["causes"], before
    worst = cmp["workers"][0]
    assert (worst["dp_rank"], worst["pp_rank"]) == (1, 0) and worst["change"] < 0, cmp["workers"]
