"""``diagnose`` builds its JSON without the pydantic models; the Diagnosis model stays the contract.

- ``diagnosis_doc.diagnosis_json`` (what ``straggler-lens diagnose --json`` prints) is the same JSON
  text as the ``Diagnosis`` validated from it and dumped again, key order included, and as the
  server's ``diagnose()`` given a stored report, on the study's samples and on generated jobs with
  every cause (and an unreliable fidelity, which lowers confidences); the CLI prints exactly that text.
- ``plainmodel.json_text`` writes a document as pydantic's ``model_dump_json`` does (floats,
  escapes, nesting), checked against pydantic's own serializer.
- ``ReportView`` reads as the ``WhatIfReport`` model of the same document.
- The ``diagnose --json`` command does not import pydantic.
"""

from __future__ import annotations

import dataclasses
import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pydantic_core
import pytest

from diagnosers import plainmodel
from diagnosers.diagnose import Diagnosis, diagnose
from diagnosers.diagnosis_doc import diagnosis_json
from diagnosers.plainmodel import json_text
from diagnosers.readers import ReadOptions, load_trace
from diagnosers.report_view import ReportView
from diagnosers.samples import artifact_trace
from diagnosers.synth import ScenarioSpec, generate
from diagnosers.synth.spec import Scenario, Schedule
from diagnosers.whatif import analyze, build_engine, report_json
from tests.engine.test_report_unchanged import GENERATED, trace_path

ROOT = Path(__file__).resolve().parents[2]

# one job per cause the detectors find (and the seed-3 GPipe sequence-length job is unreliable)
CAUSES: dict[str, ScenarioSpec] = {
    "healthy": ScenarioSpec(dp=4, pp=4, steps=4, seed=3),
    "slow-comm": ScenarioSpec(dp=4, pp=4, steps=4, seed=3, scenarios=[Scenario.SLOW_COMMUNICATION]),
    "gc": ScenarioSpec(dp=4, pp=4, steps=4, seed=3, scenarios=[Scenario.GC_PAUSE], schedule=Schedule.GPIPE),
    "stall": ScenarioSpec(
        dp=4, pp=4, steps=4, seed=3, scenarios=[Scenario.DATALOADER_STALL, Scenario.STAGE_IMBALANCE]
    ),
    "seq-len": ScenarioSpec(
        dp=4, pp=4, steps=4, seed=3, scenarios=[Scenario.SEQUENCE_LENGTH_IMBALANCE], schedule=Schedule.GPIPE
    ),
}
CASES = ["ST", "AR", "SE", *GENERATED, *CAUSES]


def trace_of(case: str, folder: Path) -> Any:
    if case in CAUSES:
        return generate(CAUSES[case]).trace
    return load_trace([trace_path(case, folder)], ReadOptions())


@pytest.mark.parametrize("case", CASES)
def test_plain_diagnosis_is_the_models_dump(case: str, tmp_path: Path) -> None:
    trace = trace_of(case, tmp_path)
    doc = diagnosis_json(trace, engine=build_engine(trace))
    text = json_text(doc)
    assert text == Diagnosis.model_validate(doc).model_dump_json(indent=2)
    # the server's path: a stored report, the model returned
    served = diagnose(trace, analyze(trace))
    assert text == served.model_dump_json(indent=2)
    if case not in ("healthy", "gen-gpipe"):
        assert doc["causes"], "the case must exercise the detectors"


def test_the_cases_cover_every_cause_and_an_unreliable_fidelity(tmp_path: Path) -> None:
    found, verdicts = set(), set()
    for case in CAUSES:
        doc = diagnosis_json(trace_of(case, tmp_path))
        found |= {c["id"] for c in doc["causes"]}
        verdicts.add(doc["fidelity"]["verdict"])
    assert {"slow-communication", "gc-pause", "dataloader-stall", "stage-imbalance"} <= found
    assert "sequence-length-imbalance" in found and "unreliable" in verdicts


def test_report_view_reads_as_the_model() -> None:
    trace = load_trace([artifact_trace("AR")], ReadOptions())
    doc = report_json(trace)
    model, view = analyze(trace), ReportView.of(doc, trace.meta)
    for f in dataclasses.fields(view):
        if f.name == "document":
            continue
        got, want = getattr(view, f.name), getattr(model, f.name)
        if dataclasses.is_dataclass(got) and f.name not in ("fidelity", "job"):
            for g in dataclasses.fields(got):
                value, expected = getattr(got, g.name), getattr(want, g.name)
                if g.name == "by_worker":
                    value = [dataclasses.asdict(w) for w in value]
                    expected = [w.model_dump() for w in expected]
                assert value == expected, (f.name, g.name)
        else:
            assert got == want, f.name
    assert view.document is doc


def _random_document(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(8 if depth < 3 else 5)
    if kind == 0:
        return rng.random() * 10.0 ** rng.randint(-12, 20) * rng.choice([1, -1])
    if kind == 1:
        return rng.choice([0.0, -0.0, 1.0, 1e-5, 2.5e-5, 1e-4, 9.99e-5, 1e-7, 1e16, 1e-300, 5e-324])
    if kind == 2:
        return rng.randint(-(10**6), 10**6)
    if kind == 3:
        return rng.choice(
            ["", "1e-05 ms", '"quoted 2.5e-07"', "back\\slash 1e-05", "é ✓ \u2028", "tab\tnl\n"]
        )
    if kind == 4:
        return rng.choice([None, True, False])
    if kind in (5, 6):
        return {f"k{i} 1e-05": _random_document(rng, depth + 1) for i in range(rng.randrange(4))}
    return [_random_document(rng, depth + 1) for _ in range(rng.randrange(4))]


@pytest.mark.parametrize("indent", [2, None])
def test_json_text_is_pydantics(indent: int | None) -> None:
    rng = random.Random(7)
    for _ in range(3000):
        doc = _random_document(rng)
        assert json_text(doc, indent) == pydantic_core.to_json(doc, indent=indent).decode(), doc


_LINE_END_STRINGS = ["ends 1.5e-07", "1e-05", "-2.5e-10", "nl\n1e-05", "a: 3e-08,", "\u2028 4e-06"]


def _tricky_document(rng: random.Random, depth: int = 0) -> Any:
    # strings that end (or are) what a small float looks like, where a line could end
    if depth < 3 and rng.random() < 0.5:
        keys = [rng.choice(_LINE_END_STRINGS) for _ in range(rng.randrange(3))]
        return {k: _tricky_document(rng, depth + 1) for k in keys}
    if depth < 3 and rng.random() < 0.3:
        return [_tricky_document(rng, depth + 1) for _ in range(rng.randrange(3))]
    return rng.choice(_LINE_END_STRINGS) if rng.random() < 0.5 else _random_document(rng, 3)


@pytest.mark.parametrize("indent", [0, 1, 2, 4])
def test_small_floats_found_at_line_ends_as_by_scanning_every_string(indent: int) -> None:
    # the indented path's search (plainmodel._small_floats_of_lines) against the scan of the
    # whole text it replaces, and against pydantic itself
    rng = random.Random(11)
    for _ in range(3000):
        doc = _tricky_document(rng)
        text = json.dumps(doc, indent=indent, ensure_ascii=False, separators=(",", ": "))
        want = plainmodel._STRING_OR_SMALL_FLOAT.sub(plainmodel._as_pydantic_float, text)
        assert plainmodel._small_floats_of_lines(text) == want, doc
        if indent:
            assert json_text(doc, indent) == pydantic_core.to_json(doc, indent=indent).decode(), doc


def run_cli(*args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "server.cli", *args], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return out.stdout


def test_cli_prints_the_models_json() -> None:
    path = artifact_trace("ST")
    want = diagnose(load_trace([path], ReadOptions())).model_dump_json(indent=2)
    assert run_cli("diagnose", str(path), "--no-similar", "--json") == want + "\n"


def test_diagnose_command_does_not_import_pydantic() -> None:
    code = (
        "import sys; from server.cli import main; "
        f"rc = main(['diagnose', {str(artifact_trace('ST'))!r}, '--no-similar', '--json']); "
        "mods = sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'pydantic_core')); "
        "print('PYDANTIC', rc, mods)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.splitlines()[-1] == "PYDANTIC 0 []"
    assert json.loads("\n".join(out.stdout.splitlines()[:-1]))["causes"]
