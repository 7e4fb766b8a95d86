"""Helpers for tests on the real recordings in ``tests/data``: a recording's folder (checked to
hold its ``injections.json``), its truth, and the top cause the diagnosis names for it."""

from __future__ import annotations

import json
from pathlib import Path

from diagnosers.diagnose import diagnose
from diagnosers.readers import load_trace
from diagnosers.whatif import analyze

DATA = Path(__file__).resolve().parents[1] / "data"
WIDENED = DATA / "kineto_widened"


def widened_folder(part: str, name: str) -> Path:
    """The folder of the example job's recording ``name`` in part ``part`` of the widened data."""
    f = WIDENED / part / name
    assert (f / "injections.json").is_file(), f"missing recording {f}"
    return f


def truth(folder: Path) -> dict[str, object]:
    """What the recorder injected (``injections.json``)."""
    return json.loads((folder / "injections.json").read_text())


def top_cause(folder: Path) -> tuple[str, list[int]]:
    """(cause id, ranks) of the diagnosis's top cause for the recording's traces; ("none", [])
    when it names none."""
    trace = load_trace([folder / "traces"])
    dg = diagnose(trace, analyze(trace))
    return (dg.causes[0].id.value, list(dg.causes[0].location.ranks)) if dg.causes else ("none", [])
