"""The forks of a dataset export, as the fit and the evaluation read them.

One fork per (kernel, sizes, card, setting) of the export's `pools`: every member of its
pool (the candidates the rule enumerates, in the rule's order, then any measured schedule
the rule does not emit) with what was measured of it, which member is golden and which is
the rule's first option. The kernel comes from its stored loop-program text; the card from
the export's own `cards` row (`CardRow.to_card`), else from the card table with the user's
card file (`--cards`, `$EMMY_CARDS`), else it is described nowhere (None: its hardware
features are missing) and counted. Reads Arrow tables through polars.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from emmy_core.ir import Extern, Program, parse
from emmy_core.targets.card import Card

Progress = Callable[[str], None]


@dataclass
class DatasetFork:
    """One fork of the dataset and its whole pool (arrays in the pool's order)."""

    kernel_id: str
    sizes: str
    card_name: str
    setting: str
    kernel: Program | Extern
    card: Card | None
    knobs: list[dict[str, object]]
    schedule_ids: list[str]
    measured: np.ndarray  # bool
    ok: np.ndarray  # bool: measured and working
    times: np.ndarray  # µs, NaN where not measured or failed
    golden: int | None = None  # index of the golden member
    first: int | None = None  # index of the rule's first option (candidate_rank 0)
    features: Any = field(default=None, repr=False)  # FeatureRows, filled by the fit

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.kernel_id, self.sizes, self.card_name, self.setting)

    @property
    def target(self) -> str | None:
        return self.card.target if self.card is not None else None

    @property
    def family(self) -> str:
        """matmul, row, elementwise (an Emmy kernel's shape) or extern (a kernel defined outside Emmy)."""
        if isinstance(self.kernel, Extern):
            return "extern"
        from emmy_core.ir.family import classify

        return classify(self.kernel).family


@dataclass
class Dataset:
    """The forks of an export, its digest, and counts of what could not be described."""

    digest: str
    forks: list[DatasetFork]
    undescribed_pools: int
    undescribed_cards: list[str]

    def content_digest(self) -> str:
        """sha256 of what a fit reads (forks, members, outcomes, goldens, card descriptions), whatever the
        export's own digest: two imports of one freeze stamp rows at different times but fit the same."""
        h = hashlib.sha256()
        for f in self.forks:
            card = "" if f.card is None else json.dumps(f.card.numeric(), sort_keys=True)
            h.update(json.dumps([f.key, f.golden, f.first, card, f.schedule_ids, f.measured.tolist(), f.ok.tolist(),
                                 [repr(float(t)) for t in f.times]]).encode("utf-8"))
        return h.hexdigest()


def check_fittable(dataset: Dataset) -> None:
    """Refuses (PriorError) a dataset a fit cannot learn from or be judged on: no pool with a working
    measurement or a golden (every row failed), or such pools of one kernel only (cross-validation by
    kernel would have 0 folds)."""
    from emmy_core.prior.artifact import PriorError

    usable = [f for f in dataset.forks if f.golden is not None or bool(f.ok.any())]
    if not usable:
        raise PriorError(f"dataset {dataset.digest[:16]}: none of its {len(dataset.forks)} pools has a working "
                         "measurement or a golden (every measured row failed): nothing to fit")
    kernels = {f.kernel_id for f in usable}
    if len(kernels) < 2:
        raise PriorError(f"dataset {dataset.digest[:16]}: only {len(usable)} pool(s) of one kernel have a working "
                         "measurement or a golden; cross-validation by kernel needs at least 2 kernels (it would "
                         "have 0 folds)")


def _card_from_row(row: dict[str, Any]) -> Card | None:
    from emmy_core.store.rows import CARD_NUMBERS, CardRow

    numbers = {k: row[k] for k in CARD_NUMBERS if row.get(k) is not None}
    card = CardRow(row["name"], row["target"], numbers, row.get("arch") or "",
                   tuple(row["tensor_cores"].split(",")) if row.get("tensor_cores") else ())
    if not card.described:
        return None
    try:
        return card.to_card()
    except ValueError:
        return None


def describe_cards(rows: list[dict[str, Any]], names: set[str], cards_file: Path | str | None) -> dict[str, Card | None]:
    """Each card's description: the export's own row, else the card table (with the user's file), else None."""
    from emmy_core.targets.user_cards import known_table

    out: dict[str, Card | None] = {r["name"]: _card_from_row(r) for r in rows}
    missing = sorted(n for n in names if out.get(n) is None)
    if cards_file is not None and not missing:
        known_table(cards_file)  # a card file named is read (and refused when broken) even when no card needs it
    if missing:
        table = known_table(cards_file)
        for name in missing:
            out[name] = table.get(name)
    return out


def _kernel(snap: Any, kernels: dict[str, str], kid: str) -> Program | Extern:
    """A pool's kernel parsed from the export's text; SourceError naming the file, row and column else."""
    from emmy_core.fileio.sourcefile import SourceError
    from emmy_core.ir import IRError

    try:
        return parse(kernels[kid])
    except IRError as exc:
        row = list(kernels).index(kid)
        raise SourceError(snap.file("kernels"), f"kernels row {row}", "loop_program",
                          f"kernel {kid[:16]!r} does not parse: {str(exc)[:300]}") from None


def read_dataset(export_dir: Path | str, cards_file: Path | str | None = None,
                 progress: Progress | None = None) -> Dataset:
    """Every fork of a verified export (refused naming both versions when it is another export version)."""
    import polars as pl

    from emmy_core.exchange.export import open_snapshot

    snap = open_snapshot(export_dir)  # the manifest and the tables of one export, their content checked
    manifest, tables = snap.manifest, snap.tables
    pools = pl.from_arrow(tables["pools"])
    kernels = {r["kernel_id"]: r["loop_program"] for r in tables["kernels"].to_pylist()}
    goldens = pl.from_arrow(tables["goldens"]).filter(pl.col("schedule_id").is_not_null())
    golden_of = {(r["kernel_id"], r["sizes"], r["card"], r["setting"]): r["schedule_id"]
                 for r in goldens.iter_rows(named=True)}
    assert isinstance(pools, pl.DataFrame)
    cards = describe_cards(tables["cards"].to_pylist(), set(pools["card"].unique().to_list()), cards_file)
    parsed: dict[str, Program | Extern] = {}
    pools = pools.sort(["kernel_id", "sizes", "card", "setting", pl.col("candidate_rank").fill_null(2**31 - 1),
                        "schedule_id"])
    forks: list[DatasetFork] = []
    undescribed = 0
    keys = ["kernel_id", "sizes", "card", "setting"]
    for key, group in pools.group_by(keys, maintain_order=True):
        kid, sizes, card_name, setting = (str(k) for k in key)
        if kid not in parsed:
            parsed[kid] = _kernel(snap, kernels, kid)
        card = cards.get(card_name)
        if card is None:
            undescribed += 1
        measured = group["measured"].to_numpy().astype(bool)
        status = group["status"].to_list()
        ok = np.array([m and s == "ok" for m, s in zip(measured, status, strict=True)], dtype=bool)
        times = group["median_us"].to_numpy().astype(np.float64)
        times = np.where(ok, times, math.nan)
        sids = group["schedule_id"].to_list()
        ranks = group["candidate_rank"].to_list()
        golden_sid = golden_of.get((kid, sizes, card_name, setting))
        fork = DatasetFork(kid, sizes, card_name, setting, parsed[kid], card, [json.loads(k) for k in group["knobs"]],
                    sids, measured, ok, times,
                    golden=sids.index(golden_sid) if golden_sid in sids else None,
                    first=ranks.index(0) if 0 in ranks else None)
        forks.append(fork)
    if progress is not None:
        progress(f"{len(forks)} forks read")
    missing_cards = sorted({f.card_name for f in forks if f.card is None})
    return Dataset(str(manifest["digest"]), forks, undescribed, missing_cards)
