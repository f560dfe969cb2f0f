"""The schedule hint of `make test` (tests/conftest.py SLOWEST_FIRST) names test files that exist, each
once, and the collection puts their tests first in that order."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import SLOWEST_FIRST, slowest_first

ROOT = Path(__file__).resolve().parents[2]


def test_every_file_the_schedule_starts_first_exists_and_is_named_once() -> None:
    assert len(set(SLOWEST_FIRST)) == len(SLOWEST_FIRST)
    missing = [name for name in SLOWEST_FIRST if not (ROOT / name).is_file()]
    assert not missing, f"renamed or removed test files still in SLOWEST_FIRST: {missing}"


class _Item:
    """What the reordering reads of a collected test: its file."""

    def __init__(self, path: Path, name: str) -> None:
        self.path, self.name = path, name


def test_the_slowest_files_are_collected_first_in_the_hints_order_and_the_rest_keep_theirs() -> None:
    early, late = ROOT / SLOWEST_FIRST[0], ROOT / SLOWEST_FIRST[1]
    other, another = ROOT / "tests" / "a_quick_file.py", ROOT / "tests" / "z_quick_file.py"
    items = [_Item(other, "o1"), _Item(late, "l1"), _Item(another, "a1"), _Item(early, "e1"), _Item(other, "o2"),
             _Item(early, "e2"), _Item(Path("/elsewhere/test_x.py"), "x1")]
    slowest_first(items)  # type: ignore[arg-type]
    assert [i.name for i in items] == ["e1", "e2", "l1", "o1", "a1", "o2", "x1"]
