"""Goldens from measurements: the fastest clean row of every measured pool becomes the reviewed choice.

A pool is (kernel, sizes, card, setting). Only `ok` rows count (flagged rows were never
recorded, failures never win); a pool with fewer than `min_pool` ok rows is skipped, so a
golden always beat at least that many measured rivals (the design's 16 by default: one
noisy sample must not become a "reviewed" choice). A pool whose golden is a structural
decision keeps it (a recorded decision outranks any schedule). Goldens go through the one
writer; each new or replaced golden is reported with the time it beat.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from emmy_core.store.interface import MeasurementStore
from emmy_core.store.rows import GoldenRow, StoredGolden, StoredMeasurement

DEFAULT_MIN_POOL = 16

Pool = tuple[str, str, str, str]


@dataclass(frozen=True)
class GoldenChange:
    """A golden promotion writes: `new` (the pool had none) or `replaced` (another schedule was golden)."""

    kind: str
    pool: Pool
    knobs: dict[str, object]
    median_us: float
    rivals: int  # other ok rows in the pool
    runner_up_us: float | None  # the best rival's time (None: no rival)
    old_knobs: dict[str, object] | None = None
    old_median_us: float | None = None  # the replaced golden's measured time here (None: not measured)


@dataclass(frozen=True)
class Promotion:
    goldens: tuple[GoldenRow, ...]  # those written (new or replaced)
    pools: int  # pools seen
    skipped: int  # pools with fewer than min_pool ok rows
    changes: tuple[GoldenChange, ...] = ()
    unchanged: int = 0  # pools whose golden already was their fastest row
    decisions_kept: int = 0  # pools whose golden is a structural decision


def fastest_goldens(store: MeasurementStore, *, card: str | None = None, setting: str | None = None,
                    min_pool: int = DEFAULT_MIN_POOL) -> Promotion:
    """The golden each measured pool would get (its fastest ok row; ties: lowest schedule_id), compared
    with the golden it has."""
    if min_pool < 1:
        raise ValueError(f"min_pool must be at least 1, got {min_pool}")
    pools: dict[Pool, list[StoredMeasurement]] = defaultdict(list)
    for m in store.measurements(card=card, setting=setting):
        pools[(m.kernel_id, m.sizes, m.card, m.setting)]
        if m.status == "ok":
            pools[(m.kernel_id, m.sizes, m.card, m.setting)].append(m)
    current: dict[Pool, StoredGolden] = {(g.kernel_id, g.sizes, g.card, g.setting): g
                                         for g in store.goldens(card=card) if setting is None or g.setting == setting}
    goldens: list[GoldenRow] = []
    changes: list[GoldenChange] = []
    skipped = unchanged = decisions = 0
    for key in sorted(pools):
        ok = sorted(pools[key], key=lambda m: (m.median_us, m.schedule_id))
        if len(ok) < min_pool:
            skipped += 1
            continue
        best = ok[0]
        old = current.get(key)
        if old is not None and old.decision is not None:
            decisions += 1
            continue
        if old is not None and old.schedule_id == best.schedule_id:
            unchanged += 1
            continue
        knobs = store.knobs(best.schedule_id)
        assert knobs is not None, f"schedule {best.schedule_id} of a stored row does not resolve"
        goldens.append(GoldenRow(best.kernel_id, best.sizes, best.card, best.setting, knobs=knobs))
        runner_up = ok[1].median_us if len(ok) > 1 else None
        if old is None:
            changes.append(GoldenChange("new", key, knobs, best.median_us, len(ok) - 1, runner_up))
        else:
            was = next((m.median_us for m in ok if m.schedule_id == old.schedule_id), None)
            changes.append(GoldenChange("replaced", key, knobs, best.median_us, len(ok) - 1, runner_up,
                                        store.knobs(old.schedule_id or ""), was))
    return Promotion(tuple(goldens), len(pools), skipped, tuple(changes), unchanged, decisions)


def promote_fastest(store: MeasurementStore, *, card: str | None = None, setting: str | None = None,
                    min_pool: int = DEFAULT_MIN_POOL) -> Promotion:
    """Writes the new and replaced goldens of `fastest_goldens` as one batch."""
    promotion = fastest_goldens(store, card=card, setting=setting, min_pool=min_pool)
    if promotion.goldens:
        store.record(goldens=promotion.goldens, origin="promote-fastest")
    return promotion
