"""kill -9 at a random moment (seeded) of every command that writes: import, fresh import, freeze,
refresh-freeze, promote and a tune merging into a tune file. After the kill: `emmy db check` is clean,
each (card, kernel) count is the one before or the one after, every freeze file is the old one or the
new one, no row of a tune file is lost. One kill each here; bench/faults.py kills each many times."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.faults.kill import SCENARIOS, trial

ROWS = 1500
DELAYS = {"import": (0.6, 2.0), "fresh import": (0.6, 2.0), "freeze": (0.6, 1.5), "refresh-freeze": (0.6, 2.5),
          "promote": (0.6, 2.0), "tune into a tune file": (3.0, 8.0)}


@pytest.mark.parametrize("name", list(DELAYS))
def test_kill_minus_nine_loses_nothing(tmp_path: Path, name: str) -> None:
    scenario = SCENARIOS[name](tmp_path / "template", ROWS)
    delay = random.Random(name).uniform(*DELAYS[name])
    _, loss = trial(scenario, tmp_path / "work", delay)
    assert loss is None, f"{name} killed after {delay:.2f} s: {loss}"


def test_the_kill_checks_see_a_loss(tmp_path: Path) -> None:
    """The checks above can fail: a freeze folder with a file cut in half, a database missing a source."""
    scenario = SCENARIOS["freeze"](tmp_path / "template", 200)
    _, loss = trial(scenario, tmp_path / "work", 60.0)
    assert loss is None
    victim = next((tmp_path / "work" / "fz").glob("*.json"))
    victim.write_bytes(victim.read_bytes()[:100])
    with pytest.raises(AssertionError, match="neither the old freeze nor the new one"):
        scenario.check(tmp_path / "work")
