"""Shared fixtures of the diagnosis tests: real artifact traces and reports built from them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from diagnosers.diagnose import Diagnosis, diagnose
from diagnosers.model import JobMeta
from diagnosers.readers import ReadOptions, load_trace
from diagnosers.report import (
    Attribution,
    FixRatios,
    RatioMetric,
    StepTimes,
    WhatIfReport,
    WorkerSlowdown,
)

ARTIFACT = Path(__file__).resolve().parents[3] / "shared" / "data" / "straggler-artifact"
if not ARTIFACT.exists():  # the repo may live elsewhere; the shared data stays at /work/shared
    ARTIFACT = Path("/work/shared/data/straggler-artifact")


def report_from_expected_st() -> WhatIfReport:
    """A WhatIfReport filled from the artifact's own expected ST outputs (no engine involved).

    Per-worker values are the artifact's min(S_dp, S_pp) estimate (its heatmap's definition).
    """
    exp = ARTIFACT / "expected-ST"
    res = json.loads((exp / "result-ST.json").read_text())
    ms = json.loads((exp / "ms-ST.json").read_text())
    mw = json.loads((exp / "mw-ST.json").read_text())
    by_dp = {str(k): float(v) for k, v in res["blocking_decompose_by_dp_rank"].items()}
    by_stage = {str(k): float(v) for k, v in res["blocking_decompose_by_stage"].items()}
    workers = [
        WorkerSlowdown(
            dp_rank=d,
            pp_rank=p,
            ranks=[d + 2 * p],
            slowdown=None,
            slowdown_estimate=min(by_dp[str(d)], by_stage[str(p)]),
        )
        for d in range(2)
        for p in range(4)
    ]

    def ratio(src: dict[str, float]) -> RatioMetric:
        return RatioMetric(
            value=src["rem"],
            rem=src["rem"],
            add=src["add"],
            t_rem=src["trem"],
            t_add=src["tadd"],
            t_orig=src["tori"],
            t_ideal=src["tideal"],
        )

    steps = sorted(int(s) for s in res["blocking_step_slowdown"])
    s = float(res["blocking_slowdown"])
    return WhatIfReport(
        slowdown=s,
        straggling=s >= 1.1,
        decomposed=True,
        step_slowdown={str(k): float(v) for k, v in res["blocking_step_slowdown"].items()},
        launch_slowdown=float(res["launch_slowdown"]),
        simulation_error=float(res["launch_slowdown"]) - 1,
        attribution=Attribution(
            by_optype={k: float(v) for k, v in res["blocking_decompose_by_optype"].items()},
            by_dp_rank=by_dp,
            by_stage=by_stage,
            by_dp_rank_per_step={
                str(k): {str(a): float(b) for a, b in v.items()}
                for k, v in res["blocking_decompose_by_dp_rank_per_step"].items()
            },
            by_stage_per_step={
                str(k): {str(a): float(b) for a, b in v.items()}
                for k, v in res["blocking_decompose_by_stage_per_step"].items()
            },
            by_worker=workers,
        ),
        m_w=ratio(mw).value,
        m_s=ratio(ms).value,
        m_s_by_stage={"3": ratio(ms).value},
        fix_ratios=FixRatios(m_w=ratio(mw), m_s=ratio(ms), by_stage={"3": ratio(ms)}),
        wasted_fraction=1 - 1 / s,
        step_times=StepTimes(
            actual={str(k): float(v) for k, v in res["step_t_base"].items()},
            no_delay={str(k): float(v) for k, v in res["step_t_nodelay"].items()},
            ideal={str(k): float(v) for k, v in res["step_t_noblk"].items()},
        ),
        job=JobMeta(trial_name="ST", dp=2, pp=4),
        n_ops=6784,
        steps=steps,
    )


@pytest.fixture(scope="session")
def st_expected_report() -> WhatIfReport:
    return report_from_expected_st()


@pytest.fixture(scope="session")
def artifact_dir() -> Path:
    return ARTIFACT


_DIAGNOSES: dict[str, Diagnosis] = {}


@pytest.fixture(scope="session")
def artifact_diagnosis() -> Callable[[str], Diagnosis]:
    """Diagnose an artifact trace by name (ST with its 9 layers per stage), cached per session."""

    def get(name: str) -> Diagnosis:
        if name not in _DIAGNOSES:
            trace = load_trace(
                [ARTIFACT / f"trace-{name}.parquet"], ReadOptions(meta_path=ARTIFACT / f"meta-{name}.yaml")
            )
            layers = [9, 9, 9, 9] if name == "ST" else None
            _DIAGNOSES[name] = diagnose(trace, layers_per_stage=layers)
        return _DIAGNOSES[name]

    return get
