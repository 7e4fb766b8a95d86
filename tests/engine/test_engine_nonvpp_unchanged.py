"""Non-interleaved what-if reports stay what they were before the interleaved dependency model.

``tests/data/nonvpp_reference.json`` holds every number of the what-if report (and the diagnosis's
predicted remedy gains) for the study's three sample traces and for generated 1F1B and GPipe jobs,
recorded with the engine as it was before the interleaved (VPP) model landed. Every value must
match to 1e-9 relative. Re-record only on purpose, when a change is meant to move these numbers:

    PYTHONPATH=$PWD .venv/bin/python -m tests.engine.test_engine_nonvpp_unchanged
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from diagnosers.model import Trace
from diagnosers.readers import load_trace
from diagnosers.samples import artifact_trace
from diagnosers.synth import ScenarioSpec, Schedule, generate

REFERENCE = Path(__file__).resolve().parents[1] / "data" / "nonvpp_reference.json"
REL = 1e-9

GENERATED: dict[str, ScenarioSpec] = {
    "1f1b-healthy": ScenarioSpec(dp=4, pp=4, microbatches=8, steps=3, seed=11),
    "1f1b-stage": ScenarioSpec(dp=2, pp=4, microbatches=8, steps=3, scenarios=["stage-imbalance"], seed=12),
    "1f1b-faulty": ScenarioSpec(dp=4, pp=2, microbatches=8, steps=3, scenarios=["faulty-machine"], seed=13),
    "1f1b-seq": ScenarioSpec(
        dp=4, pp=4, microbatches=8, steps=3, scenarios=["sequence-length-imbalance"], seed=14
    ),
    "gpipe-healthy": ScenarioSpec(dp=2, pp=4, microbatches=8, steps=3, schedule=Schedule.GPIPE, seed=15),
    "gpipe-comm": ScenarioSpec(
        dp=4, pp=4, microbatches=8, steps=3, schedule=Schedule.GPIPE, scenarios=["slow-communication"],
        seed=16,
    ),
    "gpipe-gc": ScenarioSpec(
        dp=2, pp=2, microbatches=8, steps=3, schedule=Schedule.GPIPE, scenarios=["gc-pause"], seed=17
    ),
}


def _trace(case: str) -> Trace:
    if case in GENERATED:
        return generate(GENERATED[case]).trace
    return load_trace([artifact_trace(case)])


def _flatten(obj: Any, prefix: str, out: dict[str, float]) -> None:
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return
    if isinstance(obj, int | float):
        out[prefix] = float(obj)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _flatten(v, f"{prefix}.{k}", out)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            _flatten(v, f"{prefix}[{i}]", out)


def values_of(case: str) -> dict[str, float]:
    """Every number of the case's what-if report plus its remedies' predicted speedups."""
    from diagnosers.diagnose import diagnose
    from diagnosers.whatif import analyze

    trace = _trace(case)
    rep = analyze(trace)
    out: dict[str, float] = {}
    _flatten(rep.model_dump(mode="json", exclude={"job", "notes"}), "report", out)
    diag = diagnose(trace, report=rep)
    for r in diag.remedies:
        out[f"remedy.{r.cause_id}.predicted_speedup"] = r.predicted_speedup
    return out


CASES = ["ST", "AR", "SE", *GENERATED]


@pytest.fixture(scope="module")
def reference() -> dict[str, dict[str, float]]:
    data: dict[str, dict[str, float]] = json.loads(REFERENCE.read_text())
    return data


@pytest.mark.parametrize("case", CASES)
def test_non_interleaved_report_unchanged(case: str, reference: dict[str, dict[str, float]]) -> None:
    want = reference[case]
    got = values_of(case)
    # Fields added to the report since the reference was recorded are allowed (the JSON contract
    # grows, it never loses a field); every recorded number must still be there and unchanged.
    missing = sorted(set(want) - set(got))
    assert not missing, missing[:10]
    bad = [
        (k, got[k], want[k]) for k in want if not math.isclose(got[k], want[k], rel_tol=REL, abs_tol=1e-12)
    ]
    assert not bad, bad[:5]


if __name__ == "__main__":
    REFERENCE.write_text(json.dumps({c: values_of(c) for c in CASES}, indent=0, sort_keys=True) + "\n")
    print(f"wrote {REFERENCE}")
