"""`docs/architecture.md` names every package with what it owns: a package the document does not name, or a
name in its table that is no longer a package, fails here (the rule: the architecture document is complete)."""

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
