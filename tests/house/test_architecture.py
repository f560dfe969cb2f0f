"""`docs/architecture.md` names every package with what it owns: a package the document does not name, or a
name in its table that is no longer a package, fails here (the rule: the architecture document is complete).
The data system's four floors (file I/O, the store, the formats, moving data) import only downward: a module
that imports a module of a floor above its own fails here, and so does a floor table the document no longer
agrees with."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOP = ("emmy_core", "assets", "pipelines")  # the code a user installs or runs; tests/, bench/, gpu/ are not packages


def packages() -> set[str]:
    """Every Python package (a folder with `__init__.py`) under the top-level code folders, dotted."""
    out = set()
    for top in TOP:
        for init in (ROOT / top).rglob("__init__.py"):
            out.add(".".join(init.parent.relative_to(ROOT).parts))
    return out


def documented() -> set[str]:
    """The packages named in the first column of the document's package table."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## Packages", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([a-z_.]+)` \|", section, flags=re.M))


def test_the_architecture_document_names_every_package_and_only_packages() -> None:
    found, named = packages(), documented()
    assert "emmy_core.chain" in found and "emmy_core.ranking" in found
    assert not found - named, f"packages docs/architecture.md does not name: {sorted(found - named)}"
    assert not named - found, f"docs/architecture.md names packages that are gone: {sorted(named - found)}"


# The data system's four floors, bottom first (docs/architecture.md, "The data system's four floors"): a module
# of a floor imports only modules of its own floor or of the floors below it, counting imports inside functions
# and under TYPE_CHECKING (an import moved into a function still reaches up). Floor 1 imports nothing of Emmy.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("emmy_core.fileio",),
    ("emmy_core.store",),
    ("emmy_core.formats",),
    ("emmy_core.exchange", "emmy_core.freezefolder"),
)


def floor_of(module: str, floors: tuple[tuple[str, ...], ...] = FLOORS) -> int | None:
    """The floor (1 = file I/O) a dotted module belongs to, or None when it is on none of them."""
    for number, packages in enumerate(floors, start=1):
        if any(module == p or module.startswith(p + ".") for p in packages):
            return number
    return None


def upward_imports(graph: dict[str, set[str]], floors: tuple[tuple[str, ...], ...] = FLOORS) -> list[str]:
    """Every import of a floor's module that reaches a module on a higher floor, as 'a (n) -> b (m)'."""
    out = []
    for module, targets in sorted(graph.items()):
        here = floor_of(module, floors)
        if here is None:
            continue
        for target in sorted(targets):
            there = floor_of(target, floors)
            if there is not None and there > here:
                out.append(f"{module} (floor {here}) -> {target} (floor {there})")
    return out


def documented_floors() -> tuple[tuple[str, ...], ...]:
    """The packages of each row of the document's floor table, bottom first, as dotted names."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("### The data system's four floors", 1)[1].split("\n#", 1)[0]
    rows = re.findall(r"^\| \d\. [^|]+\| ([^|]+) \|", section, flags=re.M)
    return tuple(tuple(f"emmy_core.{p}" for p in re.findall(r"`([a-z_]+)`", row)) for row in rows)


def test_no_floor_of_the_data_system_imports_a_floor_above_it() -> None:
    from tests.house.test_import_cycles import import_graph, project_modules

    graph = import_graph(project_modules())
    on_floors = [m for m in graph if floor_of(m) is not None]
    assert {floor_of(m) for m in on_floors} == {1, 2, 3, 4}, "a floor has no module: FLOORS names a gone package"
    assert upward_imports(graph) == []
    outside = sorted(f"{m} -> {t}" for m in on_floors if floor_of(m) == 1
                     for t in graph[m] if t.startswith("emmy_core") and floor_of(t) != 1)
    assert outside == [], "file I/O (floor 1) imports nothing of Emmy above it"


def test_the_architecture_document_names_the_floors_the_test_checks() -> None:
    assert documented_floors() == FLOORS


def test_the_floor_check_sees_an_upward_import_hidden_in_a_function(tmp_path: Path) -> None:
    from tests.house.test_import_cycles import import_graph, project_modules

    pkg = tmp_path / "emmy_core"
    for sub in ("low", "high"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "high" / "h.py").write_text("from emmy_core.low import l\n")
    (pkg / "low" / "l.py").write_text("def f():\n    from emmy_core.high.h import g\n    return g\n")
    floors = (("emmy_core.low",), ("emmy_core.high",))
    found = upward_imports(import_graph(project_modules(tmp_path)), floors)
    assert found == ["emmy_core.low.l (floor 1) -> emmy_core.high.h (floor 2)"]
