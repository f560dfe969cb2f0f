"""`torch.compile(model, backend="emmy", options={"tune": N})`: at the first size of each size bucket a group runs,
its kernels are measured on this machine (N of Emmy's candidates each, torch's kernel beside a product's) and
recorded in the tuning database, and the forks at that size are settled from those rows (the local tier)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from emmy_core.compiler.backend import _GRAPHS
from emmy_core.knobs.route import is_library
from emmy_core.store import open_store
from tests.compile.conftest import Mlp


@pytest.fixture(autouse=True)
def fresh_dynamo() -> None:
    torch._dynamo.reset()


def test_tune_option_records_rows_and_the_settle_reads_them(tmp_path: Path) -> None:
    db = tmp_path / "tune.db"
    torch.manual_seed(0)
    model = Mlp().eval()
    x = torch.randn(6, 32)
    before = len(_GRAPHS)
    fn = torch.compile(model, backend="emmy", dynamic=False,
                       options={"tune": 2, "tuning_db": str(db), "prior": False})
    with torch.no_grad():
        torch.testing.assert_close(fn(x), model(x))
        torch.testing.assert_close(fn(x), model(x))
    groups = [g for s in _GRAPHS[before:] for g in s.live_groups()]
    assert groups and all(g.status.tuned for g in groups)
    assert all("rows recorded" in why for g in groups for why in g.status.tuned.values())
    with open_store(db, "r") as store:
        stored = list(store.measurements())
        knobs = [store.knobs(m.schedule_id) or {} for m in stored if m.status == "ok"]
        tried = [store.knobs(m.schedule_id) or {} for m in stored]
    # every variant tried is a row (ok or failed) or flagged: timed while the machine was busy, never recorded
    flagged = sum(int(m) for g in groups for why in g.status.tuned.values()
                  for m in re.findall(r"(\d+) flagged", why))
    assert stored or flagged
    assert any(is_library(k) for k in tried) or flagged  # torch's kernel beside Emmy's
    assert any(not is_library(k) for k in tried) or flagged
    if not knobs:
        pytest.skip("every timing was flagged: this machine was too busy for one to be trusted")
    measured = {(m.kernel_id, m.sizes) for m in stored if m.status == "ok"}
    settled = [r for g in groups for r in g.compiled.record.resolutions if r.applied and r.rule == "schedule"
               and (r.key.kernel_id, r.key.sizes) in measured]
    assert settled and any(r.tier == "local" for r in settled)  # a kernel measured here is settled from its rows,
    for r in settled:  # but for a product whose torch row was flagged: Emmy's kernel has not been seen to win
        assert r.tier == "local" or any(t == "local" and "torch's kernel was not measured" in why
                                         for t, why in r.tried), (r.tier, r.tried)


def test_tune_option_refuses_a_budget_that_is_not_a_positive_whole_number() -> None:
    from emmy_core.compiler.backend import emmy_backend

    for bad in (0, -1, True, 2.5, "8"):
        with pytest.raises(ValueError, match="budget"):
            emmy_backend(tune=bad)  # type: ignore[arg-type]
