"""What other cards measured of a configuration, as features: the transfer table and its `tr.*` columns.

A card nobody measured can still read what the other cards measured of the same kernel and setting:
each other card answers with its pool at the nearest sizes it measured (the same sizes when it has
them; nearest by the sum over axes of |log2 of the ratio|, only pools naming the same axes, ties to
the lower sizes text). The best configuration moves little between neighbouring sizes, and without
this a new card's pool at any size the fleet never tuned had no evidence at all (14 of 24 pools of a
new CPU's tune). The table holds, per pool (kernel id, sizes, setting) and per card, each
measured configuration's log(best / time) on that card (a failure counts as FAILED_RATIO), and each
card's hardware numbers. From it, for one fork's candidates on a card, four columns:

- `tr.score`: the mean over the other cards that measured the configuration of log(best/time)
  (the log of the transfer baseline's geometric mean);
- `tr.rank`: the share of the candidates with a transfer score whose score is strictly higher
  (0 for the best; a rank comparable across pool sizes);
- `tr.sim`: `tr.score` weighted by how similar each other card is, exp(-distance) of their hardware
  descriptions (`emmy_core.targets.similarity`: the numbers, and the vendor); missing for a card
  described nowhere;
- `tr.cards`: how many other cards measured the configuration.

A configuration no other card measured has every column missing (NaN), never zero. The card being
scored never reads its own rows (`exclude`, by name): a fit trains on what other cards know, and
scores the held-out card the same way. The table is built from the fit's training forks and travels
inside the artifact (`to_json` / `read_table`), so the compile reads it with numpy alone.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from emmy_core.targets.similarity import hardware_distance

TABLE_VERSION = 1
FAILED_RATIO = 1e-3  # best/time a failure on another card counts as (the transfer baseline's value)
SID_CHARS = 16  # schedule ids are kept by their first 16 hex digits (64 bits: no collision in one pool)
TRANSFER_NAMES: tuple[str, ...] = ("tr.score", "tr.rank", "tr.sim", "tr.cards")
MAX_POOLS = 100_000
MAX_ENTRIES = 2_000_000


def short_sid(schedule_id: str) -> str:
    return schedule_id[:SID_CHARS]


PoolKey = tuple[str, str, str]  # kernel id, sizes text, setting


@dataclass
class TransferTable:
    """Per pool, per card: {short schedule id: log(best/time)}; per card its hardware numbers."""

    pools: dict[PoolKey, dict[str, dict[str, float]]] = field(default_factory=dict)
    cards: dict[str, dict[str, float]] = field(default_factory=dict)

    @classmethod
    def from_forks(cls, forks: Iterable[Any]) -> TransferTable:
        """The table of dataset forks (`emmy_core.prior.dataset.DatasetFork`): their measured members only."""
        table = cls()
        for fork in forks:
            if not fork.measured.any():
                continue
            best = float(np.nanmin(fork.times)) if fork.ok.any() else math.nan
            ratios: dict[str, float] = {}
            for sid, measured, ok, t in zip(fork.schedule_ids, fork.measured, fork.ok, fork.times, strict=True):
                if measured:
                    ratios[short_sid(sid)] = math.log(best / float(t)) if ok else math.log(FAILED_RATIO)
            table.pools.setdefault((fork.kernel_id, fork.sizes, fork.setting), {})[fork.card_name] = ratios
            if fork.card_name not in table.cards:
                table.cards[fork.card_name] = dict(fork.card.numeric()) if fork.card is not None else {}
        return table

    _sizes: dict[tuple[str, str], list[tuple[str, dict[str, float]]]] | None = field(
        default=None, init=False, repr=False, compare=False)

    def _measured_sizes(self, kernel_id: str, setting: str) -> list[tuple[str, dict[str, float]]]:
        """The sizes (text, log2 per axis) at which any card measured this kernel under this setting."""
        if self._sizes is None:
            index: dict[tuple[str, str], list[tuple[str, dict[str, float]]]] = {}
            for k, sz, st in sorted(self.pools):
                logs = _log_sizes(sz)
                if logs is not None:
                    index.setdefault((k, st), []).append((sz, logs))
            self._sizes = index
        return self._sizes.get((kernel_id, setting), [])

    def others(self, kernel_id: str, sizes: str, setting: str, exclude: str | None) -> list[tuple[str, dict[str, float]]]:
        """(card, ratios) of every card but `exclude` that measured this kernel under this setting, each at
        its nearest measured sizes (see the module's docstring), sorted by card."""
        exact = {c: r for c, r in self.pools.get((kernel_id, sizes, setting), {}).items() if c != exclude}
        want = _log_sizes(sizes)
        nearest: dict[str, tuple[float, str]] = {}
        if want is not None:
            for text, logs in self._measured_sizes(kernel_id, setting):
                d = _size_distance(want, logs)
                if text == sizes or math.isinf(d):
                    continue
                for card in self.pools[(kernel_id, text, setting)]:
                    if card != exclude and card not in exact and (card not in nearest or (d, text) < nearest[card]):
                        nearest[card] = (d, text)
        out = dict(exact)
        for card, (_, text) in nearest.items():
            out[card] = self.pools[(kernel_id, text, setting)][card]
        return sorted(out.items())

    def has(self, kernel_id: str, sizes: str, setting: str, exclude: str | None = None) -> bool:
        """Whether any card other than `exclude` measured this kernel under this setting (at any sizes)."""
        return bool(self.others(kernel_id, sizes, setting, exclude))

    def columns(self, kernel_id: str, sizes: str, setting: str, card_numbers: Mapping[str, float] | None,
                exclude: str | None, schedule_ids: Sequence[str]) -> np.ndarray:
        """(len(schedule_ids), 4) array of the TRANSFER_NAMES columns, from every card but `exclude`."""
        n = len(schedule_ids)
        out = np.full((n, len(TRANSFER_NAMES)), np.nan)
        others = self.others(kernel_id, sizes, setting, exclude)
        if not others or not n:
            return out
        sids = [short_sid(s) for s in schedule_ids]
        values = np.array([[r.get(s, math.nan) for s in sids] for _, r in others])  # (cards, n)
        seen = ~np.isnan(values)
        count = seen.sum(axis=0)
        filled = np.where(seen, values, 0.0)
        has = count > 0
        score = np.where(has, filled.sum(axis=0) / np.maximum(count, 1), np.nan)
        out[:, 0] = score
        present = score[has]
        if len(present):
            ordered = np.sort(present)
            higher = len(present) - np.searchsorted(ordered, present, side="right")
            out[has, 1] = higher / len(present)
        if card_numbers:
            w = np.array([math.exp(-hardware_distance(card_numbers, self.cards.get(c))) for c, _ in others])
            wsum = (seen * w[:, None]).sum(axis=0)
            sim = np.where(wsum > 0, (filled * w[:, None]).sum(axis=0) / np.where(wsum > 0, wsum, 1.0), np.nan)
            out[:, 2] = np.where(has, sim, np.nan)
        out[:, 3] = np.where(has, count.astype(np.float64), np.nan)
        return out

    def to_json(self) -> dict[str, Any]:
        """The artifact's `transfer` field, pools, cards and schedule ids sorted (a stable text)."""
        pools = [{"kernel_id": k, "sizes": s, "setting": st,
                  "cards": {c: dict(sorted(r.items())) for c, r in sorted(cards.items())}}
                 for (k, s, st), cards in sorted(self.pools.items())]
        return {"version": TABLE_VERSION, "cards": {c: dict(sorted(n.items())) for c, n in sorted(self.cards.items())},
                "pools": pools}


def _log_sizes(text: str) -> dict[str, float] | None:
    """log2 of each axis of a sizes text (`B=8,S=128`; empty: a static kernel), None when it does not read."""
    out: dict[str, float] = {}
    for item in text.split(",") if text else ():
        name, eq, value = item.partition("=")
        if not eq or not value.isdigit() or int(value) <= 0:
            return None
        out[name] = math.log2(int(value))
    return out


def _size_distance(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    """Sum over axes of |log2 ratio|; inf when the two name different axes."""
    if a.keys() != b.keys():
        return math.inf
    return sum(abs(a[k] - b[k]) for k in a)


def _number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def read_table(doc: object, where: str) -> TransferTable:
    """The table of an artifact's `transfer` field, strictly; ValueError naming `where` and the field."""
    if not isinstance(doc, Mapping) or set(doc) != {"version", "cards", "pools"}:
        raise ValueError(f"{where}: must hold version, cards and pools")
    if doc["version"] != TABLE_VERSION or isinstance(doc["version"], bool):
        raise ValueError(f"{where}.version is {str(doc['version'])[:20]}; this Emmy reads transfer table version "
                         f"{TABLE_VERSION}")
    cards, pools = doc["cards"], doc["pools"]
    if not isinstance(cards, Mapping):
        raise ValueError(f"{where}.cards must be an object")
    table = TransferTable()
    for name, numbers in cards.items():
        if not isinstance(numbers, Mapping) or not all(isinstance(k, str) and _number(v) for k, v in numbers.items()):
            raise ValueError(f"{where}.cards.{str(name)[:40]}: must map field names to finite numbers")
        table.cards[str(name)] = {str(k): float(v) for k, v in numbers.items()}
    if not isinstance(pools, list) or len(pools) > MAX_POOLS:
        raise ValueError(f"{where}.pools must be a list of at most {MAX_POOLS} pools")
    entries = 0
    for i, pool in enumerate(pools):
        at = f"{where}.pools[{i}]"
        if not isinstance(pool, Mapping) or set(pool) != {"kernel_id", "sizes", "setting", "cards"}:
            raise ValueError(f"{at}: must hold kernel_id, sizes, setting and cards")
        if not all(isinstance(pool[k], str) for k in ("kernel_id", "sizes", "setting")):
            raise ValueError(f"{at}: kernel_id, sizes and setting must be strings")
        if not isinstance(pool["cards"], Mapping):
            raise ValueError(f"{at}.cards must be an object")
        key = (pool["kernel_id"], pool["sizes"], pool["setting"])
        if key in table.pools:
            raise ValueError(f"{at}: pool given twice")
        per: dict[str, dict[str, float]] = {}
        for card, ratios in pool["cards"].items():
            if card not in table.cards:
                raise ValueError(f"{at}.cards.{str(card)[:40]}: not a card of {where}.cards")
            if not isinstance(ratios, Mapping) or not all(
                    isinstance(s, str) and len(s) == SID_CHARS and _number(v) and v <= 1e-9 for s, v in ratios.items()):
                raise ValueError(f"{at}.cards.{str(card)[:40]}: must map {SID_CHARS}-digit schedule ids to "
                                 f"log(best/time) <= 0")
            entries += len(ratios)
            if entries > MAX_ENTRIES:
                raise ValueError(f"{where}: more than {MAX_ENTRIES} measured configurations")
            per[str(card)] = {str(s): float(v) for s, v in ratios.items()}
        table.pools[key] = per
    return table
