"""``straggler-lens analyze`` through ``server.cli.main``: JSON contract, summary, options, errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from diagnosers.samples import ARTIFACT_DIR, artifact_trace
from server.cli import main

TOP_LEVEL = {
    "slowdown",
    "straggling",
    "decomposed",
    "step_slowdown",
    "launch_slowdown",
    "attribution",
    "m_w",
    "m_s",
    "m_s_by_stage",
    "simulation_error",
    "wasted_fraction",
    "job",
}
ATTRIBUTION = {
    "by_optype",
    "by_dp_rank",
    "by_stage",
    "by_optype_per_step",
    "by_dp_rank_per_step",
    "by_stage_per_step",
    "by_worker",
}


def test_analyze_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(artifact_trace("ST")), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= TOP_LEVEL
    assert set(out["attribution"]) >= ATTRIBUTION
    assert isinstance(out["slowdown"], float) and out["straggling"] is True
    assert all(isinstance(k, str) for k in out["step_slowdown"])
    worker = out["attribution"]["by_worker"][0]
    assert set(worker) >= {"dp_rank", "pp_rank", "ranks", "slowdown", "slowdown_estimate"}
    assert out["job"]["dp"] == 2 and out["job"]["pp"] == 4
    assert out["m_s"] == pytest.approx(1.2193563788811714, rel=0.005)
    assert out["m_w"] == pytest.approx(0.031404269124045224, rel=0.005)
    assert out["m_s_by_stage"]["3"] == out["m_s"]
    assert out["fix_ratios"]["m_s"]["t_rem"] == pytest.approx(1.7710396162385678, rel=0.005)


def test_analyze_summary_and_meta_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a trace without its meta yaml beside it: give the meta explicitly, then only command-line keys
    trace = tmp_path / "job.parquet"
    shutil.copy(artifact_trace("AR"), trace)
    assert main(["analyze", str(trace), "--meta", str(ARTIFACT_DIR / "meta-AR.yaml")]) == 0
    text = capsys.readouterr().out
    assert "slowdown S = 1.97" in text and "dp 4 x pp 4 x tp 4" in text
    assert "dp   0 pp  0" in text.split("slowest workers")[1].splitlines()[1]
    assert (
        main(["analyze", str(trace), "--tp", "4", "--gpus-per-host", "4", "--exact-top-k", "3", "--json"])
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["job"]["tp"] == 4 and out["job"]["gpus_per_host"] == 4 and out["job"]["world_size"] == 64
    assert out["attribution"]["by_worker_exact_top_k"] == 3
    exact = [w for w in out["attribution"]["by_worker"] if w["slowdown"] is not None]
    assert len(exact) == 3 and (exact[0]["dp_rank"], exact[0]["pp_rank"]) == (0, 0)
    assert any("top 3 of 16" in n for n in out["notes"])


def test_analyze_errors_name_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "ops.jsonl"
    bad.write_text(
        '{"dp_rank": 0, "stage": 0, "rank": 0, "step": 1, "optype": "warp-drive", '
        '"start_ts": 0.0, "duration": 1.0}\n'
    )
    assert main(["analyze", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "unknown op type 'warp-drive'" in err and str(bad) in err and "step=1" in err
    assert main(["analyze", str(tmp_path / "missing.parquet")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["analyze", str(artifact_trace("ST")), "--dp", "3"]) == 2
    assert "no ops for worker dp_rank=2" in capsys.readouterr().err
