"""One tiny live run of the example training job, end to end (needs the optional torch extra)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from diagnosers.diagnose import diagnose
from diagnosers.readers import load_trace

pytest.importorskip(
    "torch", reason="the example job needs PyTorch: pip install -e '.[torch]' (torch==2.13.0, CPU)"
)

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "pp_dp_train.py"


@pytest.mark.torch
@pytest.mark.slow
def test_live_two_stage_job_records_a_readable_trace(tmp_path: Path) -> None:
    # 2 processes, 3 steps (one profiled), a slow rank: a few seconds of wall time on 2 cores
    cmd = [sys.executable, str(SCRIPT), "--dp", "1", "--pp", "2", "--steps", "3", "--microbatches", "2",
           "--hidden", "64", "--slow-rank", "0", "--slow-ms", "40", "--timeout", "20", "--out", str(tmp_path)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "step 2 loss" in done.stdout
    injections = json.loads((tmp_path / "injections.json").read_text())
    assert injections["slow_rank"] == 0 and injections["profiled_steps"] == [2]
    trace = load_trace([tmp_path / "traces"])
    assert (trace.meta.dp, trace.meta.pp) == (1, 2)
    assert trace.steps == [2]
    names = trace.ops.optype_names()
    assert {"forward-compute", "backward-compute", "forward-send", "forward-recv", "backward-send",
            "backward-recv", "optimizer"} <= set(names.tolist())
    fwd = names == "forward-compute"
    slow = trace.ops.duration[fwd & (trace.ops.rank == 0)]
    other = trace.ops.duration[fwd & (trace.ops.rank == 1)]
    assert slow.min() >= 0.04 and slow.mean() > other.mean() + 0.02
    # and the whole pipeline runs on it: what-if report and diagnosis over both workers
    d = diagnose(trace)
    assert len(d.report.attribution.by_worker) == 2 and d.summary
