"""``bench/compare_diagnoses.py``: the field-by-field check the speed work uses when an output may
move in its last bits. Numbers within the relative tolerance are equal; anything else is not."""

from __future__ import annotations

import json
from pathlib import Path

from bench.compare_diagnoses import differences, main


def _doc(slowdown: float, text: str = "rank 3 slow") -> dict[str, object]:
    return {"slowdown": slowdown, "causes": [{"id": "faulty-machine", "ranks": [3], "text": text,
                                               "fixed": True, "nan": float("nan")}]}


def test_numbers_within_the_tolerance_are_equal_and_others_are_not() -> None:
    assert differences(_doc(1.25), _doc(1.25 * (1 + 5e-10)), 1e-9, 1e-12) == []
    assert differences(_doc(0.0), _doc(1e-13), 1e-9, 1e-12) == []  # near zero: the absolute floor
    diff = differences(_doc(1.25), _doc(1.25 * (1 + 5e-9)), 1e-9, 1e-12)
    assert len(diff) == 1 and diff[0].startswith("$.slowdown")


def test_everything_but_numbers_must_be_identical() -> None:
    text = differences(_doc(1.0), _doc(1.0, "rank 4 slow"), 1e-9, 1e-12)
    assert text == ["$.causes[0].text: 'rank 3 slow' != 'rank 4 slow'"]
    a, b = _doc(1.0), _doc(1.0)
    b["causes"][0]["fixed"] = 1  # type: ignore[index]
    assert differences(a, b, 1e-9, 1e-12)  # a bool is no number
    b = _doc(1.0)
    b["causes"].append({})  # type: ignore[attr-defined]
    assert differences(a, b, 1e-9, 1e-12) == ["$.causes: length 1 != 2"]


def test_the_command_exits_1_on_a_difference(tmp_path: Path) -> None:
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    pa.write_text(json.dumps(_doc(1.25)))
    pb.write_text(json.dumps(_doc(1.25)))
    assert main([str(pa), str(pb)]) == 0
    pb.write_text(json.dumps(_doc(1.5)))
    assert main([str(pa), str(pb)]) == 1
