"""Goldens from measurements: the fastest clean row of every measured pool becomes the reviewed choice.

A pool is (kernel, sizes, card, setting). Only `ok` rows count (flagged rows were never
recorded, failures never win); a pool with fewer than `min_pool` ok rows is skipped, so a
golden always beat at least that many measured rivals. Goldens go through the one writer.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from emmy_core.store.interface import Store
from emmy_core.store.rows import GoldenRow, StoredMeasurement


@dataclass(frozen=True)
class Promotion:
    goldens: tuple[GoldenRow, ...]
    pools: int  # pools seen
    skipped: int  # pools with fewer than min_pool ok rows


def fastest_goldens(store: Store, *, card: str | None = None, setting: str | None = None,
                    min_pool: int = 1) -> Promotion:
    """The golden each measured pool would get: its fastest ok row (ties: lowest schedule_id)."""
    if min_pool < 1:
        raise ValueError(f"min_pool must be at least 1, got {min_pool}")
    pools: dict[tuple[str, str, str, str], list[StoredMeasurement]] = defaultdict(list)
    for m in store.measurements(card=card, setting=setting):
        pools[(m.kernel_id, m.sizes, m.card, m.setting)]
        if m.status == "ok":
            pools[(m.kernel_id, m.sizes, m.card, m.setting)].append(m)
    goldens: list[GoldenRow] = []
    skipped = 0
    for key in sorted(pools):
        ok = pools[key]
        if len(ok) < min_pool:
            skipped += 1
            continue
        best = min(ok, key=lambda m: (m.median_us, m.schedule_id))
        knobs = store.knobs(best.schedule_id)
        assert knobs is not None, f"schedule {best.schedule_id} of a stored row does not resolve"
        goldens.append(GoldenRow(best.kernel_id, best.sizes, best.card, best.setting, knobs=knobs))
    return Promotion(tuple(goldens), len(pools), skipped)


def promote_fastest(store: Store, *, card: str | None = None, setting: str | None = None,
                    min_pool: int = 1) -> Promotion:
    """Writes `fastest_goldens` as one batch (replacing earlier goldens of the same pools)."""
    promotion = fastest_goldens(store, card=card, setting=setting, min_pool=min_pool)
    if promotion.goldens:
        store.record(goldens=promotion.goldens, origin="promote-fastest")
    return promotion
