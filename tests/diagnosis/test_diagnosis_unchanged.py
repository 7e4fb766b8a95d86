"""Every diagnosis field stays what it was before the diagnosis speed work (1e-9 relative).

The reference diagnoses in ``tests/diagnosis/reference/`` were written by the diagnosis as it was
before that work (``diagnose`` without similar incidents, as ``diagnose --no-similar --json``
gives): the study's three samples and the seeded generated 1F1B and GPipe jobs of the report
test, read back from parquet. The shuffled cases store the same rows in a random order, so the
detectors take their general (sorting) paths instead of the block-ordered ones, and must give the
diagnosis of their ordered twin. Run this module as a script to rewrite the references, which is
only right when a change of numbers is intended.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from diagnosers.diagnose import diagnose
from diagnosers.readers import ReadOptions, load_trace
from tests.engine.test_report_unchanged import differences, trace_path

REFERENCE = Path(__file__).parent / "reference"
CASES = ["ST", "AR", "SE", "gen-1f1b", "gen-gpipe", "gen-1f1b-shuffled", "AR-shuffled"]


def diagnosis_of(case: str, folder: Path) -> dict[str, Any]:
    trace = load_trace([trace_path(case, folder)], ReadOptions())
    return diagnose(trace).model_dump(mode="json")  # type: ignore[no-any-return]


@pytest.mark.parametrize("case", CASES)
def test_diagnosis_unchanged(case: str, tmp_path: Path) -> None:
    want = json.loads((REFERENCE / f"{case.removesuffix('-shuffled')}.json").read_text(encoding="utf-8"))
    got = diagnosis_of(case, tmp_path)
    assert want["causes"], "the reference must exercise the detectors"
    # the heatmap's title is wording (rewritten in plain words after these references were made);
    # this test guards the numbers and findings
    for doc in (want, got):
        (doc.get("heatmap") or {}).pop("title", None)
    assert differences(want, got) == []


if __name__ == "__main__":
    import tempfile

    REFERENCE.mkdir(exist_ok=True)
    for case in sys.argv[1:] or [c for c in CASES if not c.endswith("-shuffled")]:
        with tempfile.TemporaryDirectory() as tmp:
            d = diagnosis_of(case, Path(tmp))
        (REFERENCE / f"{case}.json").write_text(json.dumps(d, sort_keys=True) + "\n")
        print(case, d["slowdown"], [c["id"] for c in d["causes"]])
