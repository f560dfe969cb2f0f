"""No import circle among the project's modules, counting every import: at module level, inside a function
and under TYPE_CHECKING. An import moved into a function hides a circle from Python, not from the design:
data flows one way. Lazy imports of heavy third-party packages (the light-import rule) are not edges here."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("emmy_core", "assets", "pipelines")


def project_modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted name -> file of every module of the project's packages (a package is its __init__)."""
    mods = {}
    for pkg in PACKAGES:
        for f in (root / pkg).rglob("*.py"):
            parts = list(f.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            mods[".".join(parts)] = f
    return mods


def _targets(mods: dict[str, Path], here: str, node: ast.Import | ast.ImportFrom) -> set[str]:
    """The project modules one import statement loads (`from pkg import mod` loads pkg.mod)."""
    names: list[str] = []
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            parts = here.split(".")
            keep = len(parts) - node.level + (1 if mods[here].name == "__init__.py" else 0)
            base = ".".join([*parts[:keep], *([base] if base else [])])
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
    out = set()
    for name in names:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        if name and name != here:
            out.add(name)
    return out


def import_graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the project modules it imports anywhere in its text."""
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        graph[name] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                graph[name] |= _targets(mods, name, node)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_the_project_import_graph_is_acyclic_counting_imports_inside_functions() -> None:
    graph = import_graph(project_modules())
    assert len(graph) > 100
    assert cycles(graph) == []


def test_the_cycle_finder_sees_a_circle_hidden_in_a_function(tmp_path: Path) -> None:
    pkg = tmp_path / "emmy_core"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from emmy_core.b import g\n\ndef f():\n    return g()\n")
    (pkg / "b.py").write_text("def g():\n    from emmy_core import a\n    return a\n")
    (pkg / "c.py").write_text("import json\nfrom . import a\n")
    graph = import_graph(project_modules(tmp_path))
    assert graph["emmy_core.c"] == {"emmy_core.a"}
    assert cycles(graph) == [["emmy_core.a", "emmy_core.b"]]
