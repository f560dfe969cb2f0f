"""What a store holds, as typed rows: measurements, schedules, cards, routing, goldens.

These are plain values (no database import): the tune harness, the importers and the
replay runner build them; the one writer (`MeasurementStore.record` / `MeasurementStore.transaction`) validates
and stores them. A `Schedule` is a knob assignment checked against the schedule
vocabulary once, with its canonical JSON and digest computed once, so that a million rows
sharing a few thousand schedules pay for the digest a few thousand times.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from emmy_core.bench.harness import BENCH_FAILURE_KINDS
from emmy_core.bench.watchdog import PLACEHOLDER_US
from emmy_core.knobs.vocab import canonical_knobs, knobs_problem, schedule_id_of_text
from emmy_core.targets.card import TARGETS

STATUSES = ("ok", "failed")
SOURCES = ("tune", "hand", "import")
# A failed row's kind: the bench's own, and `invalid` (a configuration Kernel Tuner refused; imported rows only).
FAILURE_KINDS = (*BENCH_FAILURE_KINDS, "invalid")
# PLACEHOLDER_US: the watchdog's placeholder time (microseconds) in `median_us` of every failed row.

CARD_NAME_PATTERN = re.compile(r"[A-Za-z0-9_][ -~]{0,127}\Z")  # printable ASCII, at most 128 characters
HEX64 = re.compile(r"[0-9a-f]{64}\Z")

# The numeric description of a card kept in `cards` (all nullable: unknown is NULL, never 0).
CARD_NUMBERS: dict[str, type] = {
    "sm_count": int,
    "cores": int,
    "memory_gb": float,
    "bandwidth_gbs": float,
    "smem_per_sm_kb": float,
    "smem_per_block_kb": float,
    "registers_per_sm": int,
    "registers_per_thread": int,
    "max_threads_per_block": int,
    "max_threads_per_sm": int,
    "warp_size": int,
    "l2_mb": float,
    "cc_major": int,
    "cc_minor": int,
    "clock_mhz": float,
    "peak_tflops_f16": float,
    "peak_tflops_f16_acc16": float,
    "peak_tflops_f32": float,
    "l1d_kb": float,
    "l2_kb": float,
    "l3_kb": float,
    "simd_bits": int,
}

# Column of `cards` <- field of emmy_core.targets.Card (the compute capability is split into cc_major/minor).
CARD_FIELDS_FROM_TARGETS: dict[str, str] = {
    "sm_count": "sms", "cores": "cores", "memory_gb": "mem_gb", "bandwidth_gbs": "mem_bw_gbs",
    "smem_per_sm_kb": "smem_per_sm_kib", "smem_per_block_kb": "smem_per_block_kib",
    "registers_per_sm": "regs_per_sm", "registers_per_thread": "regs_per_thread",
    "max_threads_per_block": "max_threads_per_block", "max_threads_per_sm": "max_threads_per_sm",
    "warp_size": "warp_size", "l2_mb": "l2_mib", "clock_mhz": "freq_mhz", "peak_tflops_f16": "fp16_tflops",
    "peak_tflops_f16_acc16": "fp16_acc16_tflops", "peak_tflops_f32": "fp32_tflops", "l1d_kb": "l1d_kib",
    "l2_kb": "l2_kib", "l3_kb": "l3_kib", "simd_bits": "simd_bits",
}
_TAG = re.compile(r"[a-z0-9_]{1,40}\Z")
AMD_ARCH_PREFIXES = ("cdna", "rdna", "gcn")  # arch tags of AMD GPUs (their compute capability is a gfx id)


class KnobError(ValueError):
    """A knob assignment outside the schedule vocabulary, or one that spells a structural decision."""


@dataclass(frozen=True, eq=False)
class Schedule:
    """A validated knob assignment: `knobs` (a copy), its canonical JSON `text` and digest `schedule_id`."""

    knobs: Mapping[str, object]
    text: str = field(init=False)
    schedule_id: str = field(init=False)

    def __post_init__(self) -> None:
        problem = knobs_problem(dict(self.knobs) if isinstance(self.knobs, Mapping) else self.knobs)
        if problem is not None:
            raise KnobError(problem)
        knobs = dict(self.knobs)
        object.__setattr__(self, "knobs", knobs)
        text = canonical_knobs(knobs)
        object.__setattr__(self, "text", text)
        object.__setattr__(self, "schedule_id", schedule_id_of_text(text))

    @classmethod
    def from_text(cls, text: str) -> Schedule:
        """Reads canonical knob JSON (as stored in `schedules.knobs`)."""
        try:
            knobs = json.loads(text)
        except ValueError as exc:
            raise KnobError(f"knobs are not JSON: {exc}") from None
        return cls(knobs)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Schedule) and other.schedule_id == self.schedule_id

    def __hash__(self) -> int:
        return hash(self.schedule_id)


@dataclass(frozen=True, slots=True)
class MeasurementRow:
    """One measured (or failed) variant: the key is (kernel_id, sizes, knobs, card, setting).

    `knobs` is a knob mapping or a `Schedule`; `sizes` is canonical text (`B=8,S=512`, or ``
    for a static kernel). A failed row carries `failure` (one of FAILURE_KINDS) and the
    placeholder time; `measured_at` defaults to the time of the write (UTC) for a row measured now, and
    to none for a row read from a file that keeps no time (`Batch.taken_now`).
    """

    kernel_id: str
    sizes: str
    knobs: Mapping[str, object] | Schedule
    card: str
    setting: str
    status: str
    median_us: float
    spread: float | None = None
    samples: int = 0
    source: str = "tune"
    failure: str | None = None
    measured_at: _dt.datetime | None = None

    @classmethod
    def ok(cls, kernel_id: str, sizes: str, knobs: Mapping[str, object] | Schedule, card: str, setting: str,
           median_us: float, *, spread: float | None = None, samples: int = 1, source: str = "tune",
           measured_at: _dt.datetime | None = None) -> MeasurementRow:
        return cls(kernel_id, sizes, knobs, card, setting, "ok", median_us, spread, samples, source, None,
                   measured_at)

    @classmethod
    def failed(cls, kernel_id: str, sizes: str, knobs: Mapping[str, object] | Schedule, card: str,
               setting: str, failure: str, *, source: str = "tune",
               measured_at: _dt.datetime | None = None) -> MeasurementRow:
        return cls(kernel_id, sizes, knobs, card, setting, "failed", PLACEHOLDER_US, None, 0, source,
                   failure, measured_at)


@dataclass(frozen=True, slots=True)
class StoredMeasurement:
    """A measurement as the store holds it (knobs by `schedule_id`)."""

    kernel_id: str
    sizes: str
    schedule_id: str
    card: str
    setting: str
    status: str
    failure: str | None
    median_us: float
    spread: float | None
    samples: int
    source: str
    measured_at: _dt.datetime | None  # None: imported from a source that keeps no time


@dataclass(frozen=True)
class CardRow:
    """A card by its full name, its target and its description: numbers (any may be unknown), its
    architecture and the tensor-core instructions it offers (empty: unknown or none)."""

    name: str
    target: str
    numbers: Mapping[str, float | int | None] = field(default_factory=dict)
    arch: str = ""
    tensor_cores: tuple[str, ...] = ()

    @classmethod
    def from_card(cls, card: Any) -> CardRow:
        """The store's row for an `emmy_core.targets.Card` (its numbers under the store's column names)."""
        numbers: dict[str, float | int | None] = {
            col: getattr(card, f) for col, f in CARD_FIELDS_FROM_TARGETS.items() if getattr(card, f) is not None}
        cc = card.cc
        if cc is not None:
            numbers["cc_major"], numbers["cc_minor"] = cc
        return cls(card.name, card.target, numbers, card.arch, tuple(card.tensor_cores))

    @property
    def described(self) -> bool:
        """Whether the row says anything about the hardware (a name alone describes nothing)."""
        return any(v is not None for v in self.numbers.values())

    def to_card(self) -> Any:
        """The `emmy_core.targets.Card` this row describes: the inverse of `from_card`.

        Pools and features are built from the store's own description of a card, never from the
        host's table or probe, so an export is the same on every machine. The store keeps no
        AMD `gfx` identifier: a GPU whose arch tag is an AMD family (cdna*, rdna*, gcn*) gets
        the bare compute capability `gfx` (vendor AMD, exact id unknown). A number the Card
        refuses (zero) raises ValueError naming the card and the field.
        """
        from emmy_core.targets.card import Card

        kwargs: dict[str, Any] = {}
        for col, fname in CARD_FIELDS_FROM_TARGETS.items():
            v = self.value(col)
            if v is not None:
                kwargs[fname] = v
        major, minor = self.value("cc_major"), self.value("cc_minor")
        if self.target == "cpu":
            cc = ""
        elif self.arch.startswith(AMD_ARCH_PREFIXES):
            cc = "gfx"
        else:
            cc = f"{major}.{minor or 0}" if major is not None else ""
        return Card(name=self.name, target=self.target, arch=self.arch, compute_capability=cc,
                    tensor_cores=tuple(self.tensor_cores), source="the store's cards table", **kwargs)

    def problem(self) -> str | None:
        if not isinstance(self.name, str) or not CARD_NAME_PATTERN.match(self.name):
            return f"card name {str(self.name)[:80]!r} is not 1-128 printable ASCII characters"
        if self.target not in TARGETS:
            return f"card {self.name!r}: target {str(self.target)[:20]!r} is not one of {', '.join(TARGETS)}"
        if not isinstance(self.arch, str) or (self.arch and not _TAG.match(self.arch)):
            return f"card {self.name!r}: arch {str(self.arch)[:40]!r} is not a lower-case tag"
        if not isinstance(self.tensor_cores, tuple | list) or not all(
                isinstance(t, str) and _TAG.match(t) for t in self.tensor_cores):
            return f"card {self.name!r}: tensor_cores must be a list of lower-case instruction names"
        if not isinstance(self.numbers, Mapping):
            return f"card {self.name!r}: numbers must be a mapping"
        for key, value in self.numbers.items():
            kind = CARD_NUMBERS.get(key)
            if kind is None:
                return f"card {self.name!r}: unknown field {str(key)[:40]!r} (known: {', '.join(CARD_NUMBERS)})"
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                return f"card {self.name!r}: {key} must be a number"
            if not math.isfinite(value) or value < 0:
                return f"card {self.name!r}: {key} must be finite and non-negative"
            if kind is int and not float(value).is_integer():
                return f"card {self.name!r}: {key} must be an integer"
        return None

    def normalized(self) -> CardRow:
        """The same card with its known numbers only, each of its column's type (as the store gives it back)."""
        numbers = {k: self.value(k) for k in CARD_NUMBERS if self.value(k) is not None}
        return CardRow(self.name, self.target, numbers, self.arch, tuple(self.tensor_cores))

    def value(self, key: str) -> float | int | None:
        v = self.numbers.get(key)
        if v is None:
            return None
        return int(v) if CARD_NUMBERS[key] is int else float(v)


@dataclass(frozen=True, slots=True)
class RoutingRow:
    """One kernel a structural decision minted: `decision` of `parent_id` has piece `piece_index`."""

    parent_id: str
    decision: str
    piece_index: int
    piece_id: str


@dataclass(frozen=True, slots=True)
class GoldenRow:
    """A reviewed choice for (kernel, sizes, card, setting): exactly one of `knobs` and `decision`."""

    kernel_id: str
    sizes: str
    card: str
    setting: str
    knobs: Mapping[str, object] | Schedule | None = None
    decision: str | None = None


@dataclass(frozen=True, slots=True)
class StoredGolden:
    kernel_id: str
    sizes: str
    card: str
    setting: str
    schedule_id: str | None
    decision: str | None


@dataclass(frozen=True)
class WriteSummary:
    """What one committed batch did: measurement rows offered, inserted, replaced (better), kept as they were."""

    offered: int
    inserted: int
    replaced: int
    kernels_added: int
    schedules_added: int

    @property
    def ignored(self) -> int:
        return self.offered - self.inserted - self.replaced
