"""Fixtures for the incident library tests: the packaged library and a writer for case folders."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from incidents import Library, load_library


@pytest.fixture(scope="session")
def library() -> Library:
    """The packaged library, loaded once (as the server does)."""
    return load_library()


def minimal_case(case_id: str, **overrides: Any) -> dict[str, Any]:
    """A valid case mapping with only the required fields (tests override what they exercise)."""
    case: dict[str, Any] = {
        "id": case_id,
        "slug": f"test-{case_id.lower()}",
        "title": f"Test case {case_id} with a headline number 12%",
        "organization": "Test Org",
        "date": "2024-01-02",
        "summary": "A synthetic case written for the loader tests; it only needs to be long enough.",
        "category": "other",
        "sources": [{"url": "https://example.org/report", "type": "blog"}],
    }
    case.update(overrides)
    return case


@pytest.fixture
def make_case() -> Callable[..., dict[str, Any]]:
    """``make_case(id, **overrides)``: a valid minimal case mapping."""
    return minimal_case


@pytest.fixture
def write_cases(tmp_path: Path) -> Callable[..., Path]:
    """Write case mappings as IL-NNNN.yaml files (plus a topics file) and return the cases dir."""

    def write(*cases: dict[str, Any], topics: list[dict[str, str]] | None = None,
              names: list[str] | None = None) -> Path:
        cases_dir = tmp_path / "cases"
        cases_dir.mkdir(exist_ok=True)
        for i, case in enumerate(cases):
            name = names[i] if names else f"{case['id']}.yaml"
            (cases_dir / name).write_text(yaml.safe_dump(case, allow_unicode=True), encoding="utf-8")
        topic_list = topics if topics is not None else [
            {"name": "stragglers", "title": "Stragglers", "description": "Slow workers."}
        ]
        (tmp_path / "topics.yaml").write_text(yaml.safe_dump(topic_list), encoding="utf-8")
        return cases_dir

    return write
