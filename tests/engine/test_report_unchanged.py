"""Every what-if report field stays what it was when the speed work started (1e-9 relative).

The reference reports in ``tests/engine/reports/`` were written by the unmodified engine (run this
module as a script to rewrite them, which is only right when a change of numbers is intended):
the study's three samples, seeded generated 1F1B and GPipe jobs read back from parquet, and the
same jobs with their rows shuffled (the reader's sort path must give the same report as its
already-ordered fast path). Fields added to the report later are not compared; every field in the
stored report must be present and equal.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from diagnosers.readers import ReadOptions, load_trace
from diagnosers.samples import artifact_trace
from diagnosers.synth import Scenario, ScenarioSpec, generate
from diagnosers.synth.spec import Schedule
from diagnosers.whatif import analyze
from diagnosers.writers import write_meta_yaml, write_parquet

REPORTS = Path(__file__).parent / "reports"
REL = 1e-9

GENERATED: dict[str, ScenarioSpec] = {
    "gen-1f1b": ScenarioSpec(
        dp=4, pp=4, microbatches=8, steps=3, scenarios=[Scenario.FAULTY_MACHINE], worker=(1, 2), seed=11
    ),
    "gen-gpipe": ScenarioSpec(
        dp=3,
        pp=4,
        microbatches=6,
        steps=3,
        schedule=Schedule.GPIPE,
        scenarios=[Scenario.SLOW_COMMUNICATION, Scenario.GC_PAUSE],
        seed=12,
    ),
}
CASES = ["ST", "AR", "SE", *GENERATED, "gen-1f1b-shuffled", "AR-shuffled"]


def trace_path(case: str, folder: Path) -> Path:
    """The trace file of a case: a bundled sample, or a generated job written as parquet + meta
    (``-shuffled``: the same rows in a seeded random order)."""
    name, shuffled = case.removesuffix("-shuffled"), case.endswith("-shuffled")
    if name in GENERATED:
        job = generate(GENERATED[name])
        trace = job.trace
    else:
        if not shuffled:
            return artifact_trace(name)
        trace = load_trace([artifact_trace(name)], ReadOptions())
    if shuffled:
        order = np.random.default_rng(5).permutation(len(trace.ops))
        trace.ops = trace.ops.take(order)
    write_meta_yaml(trace.meta, folder / f"meta-{case}.yaml")
    return write_parquet(trace, folder / f"trace-{case}.parquet")


def report_of(case: str, folder: Path) -> dict[str, Any]:
    trace = load_trace([trace_path(case, folder)], ReadOptions())
    return analyze(trace).model_dump(mode="json")  # type: ignore[no-any-return]


def differences(want: Any, got: Any, where: str = "") -> list[str]:
    """Where ``got`` differs from ``want``: numbers beyond ``REL`` relative, anything else unequal;
    keys of ``got`` that ``want`` lacks (fields added later) are ignored."""
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return [f"{where}: {got!r} is not a mapping"]
        return [
            d
            for k in want
            for d in (differences(want[k], got[k], f"{where}.{k}") if k in got else [f"{where}.{k}: missing"])
        ]
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return [f"{where}: {got!r} != {want!r}"]
        return [
            d
            for i, (a, b) in enumerate(zip(want, got, strict=True))
            for d in differences(a, b, f"{where}[{i}]")
        ]
    if isinstance(want, float) and not isinstance(want, bool) and isinstance(got, (int, float)):
        if math.isclose(want, got, rel_tol=REL, abs_tol=1e-12):
            return []
        return [f"{where}: {got!r} != {want!r}"]
    return [] if want == got else [f"{where}: {got!r} != {want!r}"]


@pytest.mark.parametrize("case", CASES)
def test_report_unchanged(case: str, tmp_path: Path) -> None:
    # a shuffled case must give the report of its ordered twin
    want = json.loads((REPORTS / f"{case.removesuffix('-shuffled')}.json").read_text(encoding="utf-8"))
    got = report_of(case, tmp_path)
    assert differences(want, got) == []


def test_comparison_catches_a_change() -> None:
    want = {"slowdown": 1.5, "by": [{"x": 2.0}], "notes": ["a"]}
    assert (
        differences(want, {"slowdown": 1.5 * (1 + 1e-10), "by": [{"x": 2.0}], "notes": ["a"], "new": 1}) == []
    )
    assert differences(want, {"slowdown": 1.5 * (1 + 1e-8), "by": [{"x": 2.0}], "notes": ["a"]}) != []
    assert differences(want, {"slowdown": 1.5, "by": [{"x": 2.0}], "notes": ["b"]}) != []
    assert differences(want, {"slowdown": 1.5, "by": [], "notes": ["a"]}) != []


if __name__ == "__main__":
    import tempfile

    REPORTS.mkdir(exist_ok=True)
    for case in sys.argv[1:] or [c for c in CASES if not c.endswith("-shuffled")]:
        with tempfile.TemporaryDirectory() as tmp:
            report = report_of(case, Path(tmp))
        (REPORTS / f"{case}.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
        print(case, report["slowdown"], report["n_ops"])
