"""``straggler-lens diagnose`` end to end: real files in, JSON contract and PNG out."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from server.cli import main


def test_diagnose_json_on_the_st_artifact(
    artifact_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    png = tmp_path / "st.png"
    code = main(
        [
            "diagnose",
            str(artifact_dir / "trace-ST.parquet"),
            "--meta",
            str(artifact_dir / "meta-ST.yaml"),
            "--layers-per-stage",
            "9,9,9,9",
            "--json",
            "--heatmap",
            str(png),
            "--no-similar",
        ]
    )
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["causes"][0]["id"] == "stage-imbalance"
    assert data["causes"][0]["location"]["pp_ranks"] == [3]
    assert data["straggling"] is True and data["slowdown"] > 1.1
    assert data["remedies"][0]["predicted_speedup"] >= 1.0
    assert data["similar_incidents"] == []
    assert data["report"]["slowdown"] == data["slowdown"]
    assert png.read_bytes().startswith(b"\x89PNG")


def test_diagnose_text_output_and_similar_incidents(
    artifact_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["diagnose", str(artifact_dir / "trace-AR.parquet"), str(artifact_dir / "meta-AR.yaml")])
    assert code == 0
    out = capsys.readouterr().out
    assert "faulty-machine" in out and "hottest: PP 0, DP 0" in out
    assert "similar incidents:" in out


def test_bad_layers_argument_is_a_clean_error(artifact_dir: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "server.cli",
            "diagnose",
            str(artifact_dir / "trace-ST.parquet"),
            "--layers-per-stage",
            "9,x",
        ],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        check=False,
    )
    assert proc.returncode == 2
    assert "comma-separated integers" in proc.stderr


def test_layers_that_do_not_match_pp_are_reported(
    artifact_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "diagnose",
            str(artifact_dir / "trace-ST.parquet"),
            "--meta",
            str(artifact_dir / "meta-ST.yaml"),
            "--layers-per-stage",
            "9,9",
            "--no-similar",
        ]
    )
    assert code == 2
    assert "layers_per_stage" in capsys.readouterr().err
