"""The house rules of ``server/``: no import cycle among its modules, surfaces import the core and
never another surface, the core imports no surface.

Every ``Import`` / ``ImportFrom`` node counts, function-level and ``TYPE_CHECKING`` ones included:
a lazy import is still a dependency, and a cycle hidden in a function body is still a cycle.
A surface is a direct sub-package of ``server`` other than ``core``; ``server.app`` assembles
them and only the CLI's ``serve`` command (the process entry point) may import it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVER = ROOT / "server"
# the one import of the assembler from a surface: ``straggler-lens serve`` runs the assembled app
ASSEMBLER_IMPORTERS = {"server.cli.commands.serve"}


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, name: str, known: set[str]) -> set[str]:
    """The modules of ``known`` that the file imports (``from pkg import mod`` names ``pkg.mod``
    when that is a module; relative imports resolved against ``name``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_pkg = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_pkg else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            subs = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in known]
            # names that are modules are the dependency; otherwise the names live in ``base``
            targets = subs if len(subs) == len(node.names) else [base, *subs]
        else:
            continue
        for target in targets:
            # ``import server.core.store`` also runs ``server`` and ``server.core``; only the
            # deepest known module is the dependency that matters for cycles between modules
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    files = {module_name(p, root): p for p in sorted((root / "server").rglob("*.py"))}
    known = set(files)
    return {name: imports_of(path, name, known) for name, path in files.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules (first == last), or None (iterative DFS)."""
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    for start in sorted(graph):
        if state.get(start):
            continue
        stack: list[tuple[str, list[str]]] = [(start, sorted(graph[start]))]
        path = [start]
        state[start] = 1
        while stack:
            node, todo = stack[-1]
            if not todo:
                stack.pop()
                path.pop()
                state[node] = 2
                continue
            nxt = todo.pop()
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if not state.get(nxt) and nxt in graph:
                state[nxt] = 1
                path.append(nxt)
                stack.append((nxt, sorted(graph[nxt])))
    return None


def part_of(module: str) -> str:
    """``core``, ``app``, ``package`` (``server`` itself) or the surface's name."""
    parts = module.split(".")
    if len(parts) == 1:
        return "package"
    return parts[1]


def layering_violations(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for mod, deps in sorted(graph.items()):
        mine = part_of(mod)
        for dep in sorted(deps):
            theirs = part_of(dep)
            if theirs in (mine, "package"):
                continue
            if theirs == "core":
                continue  # everyone may use the core
            if theirs == "app" and mod in ASSEMBLER_IMPORTERS:
                continue
            if mine == "app" and theirs != "app":
                continue  # the assembler imports the surfaces
            bad.append(f"{mod} ({mine}) imports {dep} ({theirs})")
    return bad


def test_server_has_no_import_cycle() -> None:
    assert find_cycle(import_graph(ROOT)) is None


def test_surfaces_import_only_the_core() -> None:
    graph = import_graph(ROOT)
    assert {part_of(m) for m in graph} >= {"core", "mcp", "rest", "cli", "app"}
    assert layering_violations(graph) == []


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_checks_see_a_function_level_cycle_and_a_surface_crossing(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "server/__init__.py": "",
            "server/core/__init__.py": "",
            "server/core/a.py": "def f():\n    from server.mcp import tools\n",
            "server/mcp/__init__.py": "",
            "server/mcp/tools.py": "from server.core import a\nfrom ..rest.routes import x\n",
            "server/rest/__init__.py": "",
            "server/rest/routes.py": "x = 1\n",
        },
    )
    graph = import_graph(tmp_path)
    assert graph["server.mcp.tools"] == {"server.core.a", "server.rest.routes"}
    assert find_cycle(graph) == ["server.core.a", "server.mcp.tools", "server.core.a"]
    assert layering_violations(graph) == [
        "server.core.a (core) imports server.mcp.tools (mcp)",
        "server.mcp.tools (mcp) imports server.rest.routes (rest)",
    ]
