"""``analyze`` builds its JSON without the pydantic models; the models stay the one contract.

- ``whatif.report_json`` (what ``straggler-lens analyze --json`` prints) is the same JSON text as
  the ``WhatIfReport`` validated from it and dumped again, key order included, on the study's
  samples and on generated 1F1B and GPipe jobs; the CLI prints exactly that text.
- The ``analyze`` command does not import pydantic (its import and model building were the largest
  part of the command's start-up).
- ``JobMeta``, a plain dataclass, takes well-typed values as they are and hands any other value
  to pydantic's validation of the class: the result (or the error) is what pydantic gives.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from diagnosers.model import JobMeta
from diagnosers.readers import ReadOptions, load_trace
from diagnosers.report import WhatIfReport
from diagnosers.samples import artifact_trace
from diagnosers.whatif import analyze, build_engine, report_json
from tests.engine.test_report_unchanged import GENERATED, trace_path

ROOT = Path(__file__).resolve().parents[2]
CASES = ["ST", "AR", "SE", *GENERATED]


def text(doc: Any) -> str:
    return json.dumps(doc, indent=1)


@pytest.mark.parametrize("case", CASES)
def test_plain_report_is_the_models_dump(case: str, tmp_path: Path) -> None:
    trace = load_trace([trace_path(case, tmp_path)], ReadOptions())
    eng = build_engine(trace)
    doc = report_json(trace, engine=eng)
    assert text(doc) == text(WhatIfReport.model_validate(doc).model_dump(mode="json"))
    assert text(doc) == text(analyze(trace, engine=eng).model_dump(mode="json"))
    # the model's report holds the trace's own job record, as before
    assert analyze(trace, engine=eng).job is trace.meta


def run_cli(*args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "server.cli", *args], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return out.stdout


@pytest.mark.parametrize("name", ["ST", "SE"])
def test_cli_prints_the_models_json(name: str) -> None:
    path = artifact_trace(name)
    want = analyze(load_trace([path], ReadOptions())).model_dump(mode="json")
    assert run_cli("analyze", str(path), "--json") == text(want) + "\n"


def test_analyze_command_does_not_import_pydantic() -> None:
    code = (
        "import sys; from server.cli import main; "
        f"rc = main(['analyze', {str(artifact_trace('ST'))!r}, '--json']); "
        "mods = sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'pydantic_core')); "
        "print('PYDANTIC', mods)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.splitlines()[-1] == "PYDANTIC []"


META_INPUTS: list[dict[str, Any]] = [
    {},
    {"dp": 2, "pp": 4, "trial_name": "ST", "run_id": 7},
    {"dp": "2", "pp": 4.0},  # converted by pydantic, as before
    {"dp": 0},
    {"pp": -1},
    {"dp": True},
    {"run_id": "r1", "world_size": 16},
    {"run_id": 1.5},
    {"trial_name": 5},
    {"pp": 2, "layers_per_stage": [9, 9]},
    {"pp": 2, "layers_per_stage": [9]},
    {"pp": 2, "layers_per_stage": (9, "9")},
    {"pp": 2, "layers_per_stage": "99"},
    {"pp": 2, "vpp": 2, "layers_per_chunk": [[1, 2], [3, 4]]},  # ints become floats
    {"pp": 2, "vpp": 2, "layers_per_chunk": [[1.0, 2.0], [3.0, 4.0]]},
    {"pp": 2, "vpp": 2, "layers_per_chunk": [[1.0, 2.0]]},
    {"gpus_per_host": 0},
    {"source_format": "artifact"},
    {"source_format": 3},
]


@pytest.mark.parametrize("kw", META_INPUTS)
def test_job_meta_matches_pydantic_validation(kw: dict[str, Any]) -> None:
    oracle = TypeAdapter(JobMeta)
    try:
        want: JobMeta | None = oracle.validate_python(kw)
    except ValidationError as exc:
        want, errors = None, [(e["loc"], e["msg"].removeprefix("Value error, ")) for e in exc.errors()]
    if want is not None:
        got = JobMeta(**kw)
        assert got == want
        assert json.dumps(got.model_dump(mode="json")) == json.dumps(oracle.dump_python(want, mode="json"))
    else:
        with pytest.raises(ValueError) as info:
            JobMeta(**kw)
        exc2 = info.value
        got_errors = (
            [(e["loc"], e["msg"].removeprefix("Value error, ")) for e in exc2.errors()]
            if isinstance(exc2, ValidationError)
            else [((), str(exc2))]
        )
        assert got_errors == errors


def test_job_meta_schema_keeps_its_bounds_and_descriptions() -> None:
    schema = TypeAdapter(JobMeta).json_schema()
    assert schema["additionalProperties"] is False
    assert schema["properties"]["dp"] == {
        "default": 1,
        "description": "data-parallel size",
        "minimum": 1,
        "title": "Dp",
        "type": "integer",
    }
    assert schema["properties"]["world_size"]["minimum"] == 0
    with pytest.raises(ValidationError, match=r"Extra inputs|Unexpected keyword"):
        TypeAdapter(JobMeta).validate_python({"dp": 1, "pp_szie": 2})
