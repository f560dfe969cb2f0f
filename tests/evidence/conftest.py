"""Evidence fixtures: a test card, a one-matmul model, and real freeze files and tuning databases for it.

Freezes are written by the store's own freeze writer from a `MemoryStore`, tuning databases by
the store's one writer into a DuckDB file: the resolver reads exactly what a user's files hold.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from torch import nn

from emmy_core.formats.freeze import freeze_store
from emmy_core.graph.decisions import Decision
from emmy_core.graph.lower import Lowered
from emmy_core.graph.pipeline import compile_module
from emmy_core.ir import Program, format_sizes, kernel_id
from emmy_core.store import CardRow, GoldenRow, MeasurementRow, MemoryStore, RoutingRow, open_store
from emmy_core.targets.card import Card

CARD = Card(name="Test CPU x2", target="cpu", arch="x86_64", compute_capability="", tensor_cores=(),
            source="tests", cores=2, l1d_kib=32.0, l2_kib=1024.0, l3_kib=8192.0, simd_bits=256, freq_mhz=2000.0)
SIZES = {"B": 2, "S": 8}  # the model's sizes the tests resolve at (T = 16 tokens)


class Proj(nn.Module):
    """One matrix product over K=1024: a schedule fork and a split-K fork (keep, K=2, K=4)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(1024, 64, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


@dataclass
class Setup:
    """What a test records: rows and goldens per kernel, for the freeze or the local database."""

    rows: list[tuple[Program, dict[str, int], dict[str, object], float]] = field(default_factory=list)
    goldens: list[tuple[Program, dict[str, int], dict[str, object] | None, str | None]] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)

    def row(self, program: Program, knobs: Mapping[str, object], us: float, sizes: Mapping[str, int] | None = None
            ) -> Setup:
        self.rows.append((program, own_sizes(program, sizes), dict(knobs), us))
        return self

    def golden(self, program: Program, knobs: Mapping[str, object] | None = None, decision: Decision | None = None,
               sizes: Mapping[str, int] | None = None) -> Setup:
        self.goldens.append((program, own_sizes(program, sizes), None if knobs is None else dict(knobs),
                             None if decision is None else decision.decision))
        if decision is not None:
            self.decisions.append(decision)
        return self

    def write(self, store: object, card: Card = CARD, setting: str = "deploy") -> None:
        kernels = {kernel_id(p): p for p, *_ in [*self.rows, *self.goldens]}
        for d in self.decisions:
            kernels.update({kernel_id(p): p for p in (d.parent, *d.pieces)})
        rows = [MeasurementRow.ok(kernel_id(p), format_sizes(s), k, card.name, setting, us, spread=0.01, samples=5)
                for p, s, k, us in self.rows]
        routing = [RoutingRow(*r) for d in self.decisions for r in d.routing_rows()]
        goldens = [GoldenRow(kernel_id(p), format_sizes(s), card.name, setting, knobs=k, decision=d)
                   for p, s, k, d in self.goldens]
        store.record(rows, kernels=kernels.values(), cards=[CardRow.from_card(card)], routing=routing,  # type: ignore[attr-defined]
                     goldens=goldens)


def own_sizes(program: Program, sizes: Mapping[str, int] | None) -> dict[str, int]:
    """The kernel's own dynamic sizes at the model's sizes (T = B * S for a token matmul)."""
    sizes = dict(sizes or {"T": SIZES["B"] * SIZES["S"]})
    return {a.name: sizes[a.name] for a in program.dynamic_axes}


def write_freeze(folder: Path, setup: Setup, card: Card = CARD) -> Path:
    store = MemoryStore()
    setup.write(store, card)
    folder.mkdir(parents=True, exist_ok=True)
    return freeze_store(store, folder, [card.name])[0]


def write_db(path: Path, setup: Setup, card: Card = CARD) -> Path:
    with open_store(path, "w") as store:
        setup.write(store, card)
    return path


@pytest.fixture(scope="session", autouse=True)
def build_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One fresh build cache for the session: builds are real, and reused between tests."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EMMY_BUILD_CACHE", str(tmp_path_factory.mktemp("evidence_build_cache")))
        yield


@pytest.fixture(scope="session")
def proj() -> tuple[nn.Module, tuple[torch.Tensor, ...], Lowered]:
    torch.manual_seed(0)
    module = Proj().eval()
    example = (torch.randn(SIZES["B"], SIZES["S"], 1024),)
    return module, example, compile_module(module, example)


def kernels_of(lowered: Lowered) -> list[Program]:
    return list({k.kernel_id: k.program for k in lowered.kernels}.values())


def pieces(decisions: Iterable[Decision]) -> list[Program]:
    return [p for d in decisions for p in d.pieces]


def schedule_of(compiled):  # type: ignore[no-untyped-def]
    """The record's schedule resolution (the one-matmul model has one)."""
    return next(r for r in compiled.record.resolutions if r.rule == "schedule")


def explain_with(proj, tmp_path: Path, freeze: Setup | None = None, db: Setup | None = None, **kw):  # type: ignore[no-untyped-def]
    """`explain` of the one-matmul model on CARD with `freeze` written as its freeze folder and `db` as its tuning
    database (no prior unless `prior=` says so)."""
    from emmy_core.compiler import explain

    module, example, _ = proj
    folder = tmp_path / "freezes"
    folder.mkdir(exist_ok=True)
    if freeze is not None:
        write_freeze(folder, freeze)
    path = tmp_path / "tune.db"
    if db is not None:
        write_db(path, db)
    kw.setdefault("prior", False)
    return explain(module, example, card=CARD, freezes=folder, tuning_db=path, **kw)
