"""The layering rule: ``diagnosers`` and ``incidents`` never import ``server``."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def test_core_packages_never_import_server() -> None:
    offenders = []
    for package in ("diagnosers", "incidents"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for mod in _imported_modules(path):
                if mod == "server" or mod.startswith("server.") or mod.split(".")[0] in {
                    "mcp",
                    "starlette",
                    "uvicorn",
                }:
                    offenders.append(f"{path.relative_to(ROOT)} imports {mod}")
    assert offenders == []


def test_layering_check_sees_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from server.core.store import Store\nimport mcp.server\n", encoding="utf-8")
    assert {"server.core.store", "mcp.server"} <= _imported_modules(bad)
