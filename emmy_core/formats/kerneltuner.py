"""Kernel Tuner cache files as measurements of external kernels.

A cache file (`.json` or `.json.gz`, see the peer data's README) becomes one `extern`
kernel per (kernel name, problem size, knob space): `Extern(kernel_name, problem,
space)` where `space` is the sha256 of the canonical JSON of `tune_params` (keys sorted,
each knob's admissible values in the file's order). Every cache entry becomes a row with
its knobs in the `extern.` namespace: a number in `time` is a working row whose median is
the median of `times` converted from milliseconds to microseconds (a `time` that is not a
positive, finite number is refused; one that is not the mean of `times` within rounding is
counted, since real caches have such entries, and the count is reported); a failure string is a
failed row with the watchdog's placeholder time and the failure kind kept. The card is the
file's `device_name`, exactly as written; an empty or missing one is refused unless a card
name is given. Nothing is trusted: every knob value must be one the file's `tune_params`
admits, and every entry's key must spell its own knob values.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass

from emmy_core.fileio.sourcefile import Fields, SourceError, json_path
from emmy_core.ir import Extern, IRError
from emmy_core.ir.check import check_extern
from emmy_core.knobs.vocab import EXTERN_PREFIX, knobs_problem
from emmy_core.store.batch import Batch
from emmy_core.store.rows import CARD_NAME_PATTERN, PLACEHOLDER_US, CardRow, MeasurementRow, Schedule

KT_FAILURES = {"CompilationFailedConfig": "build_error", "RuntimeFailedConfig": "runtime",
               "InvalidConfig": "invalid"}
TOP_KEYS = ("device_name", "kernel_name", "problem_size", "tune_params_keys", "tune_params", "objective", "cache")
MAX_KNOBS = 64
MAX_TIMES = 100_000
MEAN_TOLERANCE = 1e-9  # relative: sums of float32 samples printed in decimal stay well inside it


@dataclass
class KernelTunerCache:
    """A parsed cache: the card it was measured on, its extern kernel, the batch and its row counts.
    `time_disagrees` counts working entries whose `time` is not the mean of their `times`."""

    card: str
    kernel: Extern
    batch: Batch
    ok: int
    failed: int
    time_disagrees: int = 0


def space_digest(tune_params: dict) -> str:
    """sha256 of the canonical JSON of `tune_params` (sorted keys, compact): the knob space's identity."""
    text = json.dumps(tune_params, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def _value_key(v: object) -> tuple[type, object]:
    return (v.__class__, v)


def _params(top: Fields) -> tuple[list[str], dict[str, set], dict]:
    keys = top.array("tune_params_keys")
    params = top.mapping("tune_params")
    if not keys or len(keys) > MAX_KNOBS:
        raise top.fail("tune_params_keys", f"must name 1..{MAX_KNOBS} knobs")
    admissible: dict[str, set] = {}
    for i, k in enumerate(keys):
        if not isinstance(k, str):
            raise SourceError(top.file, json_path("$.tune_params_keys", i), "", "a knob name must be text")
        if k in admissible:
            raise SourceError(top.file, json_path("$.tune_params_keys", i), "", f"knob {k[:60]!r} named twice")
        values = params.get(k)
        if not isinstance(values, list) or not values:
            raise SourceError(top.file, "$.tune_params", k[:60], "must be a non-empty array of admissible values")
        for j, v in enumerate(values):
            problem = knobs_problem({EXTERN_PREFIX + k: v})
            if problem is not None:
                raise SourceError(top.file, json_path("$.tune_params", k, j), "", problem)
        admissible[k] = {_value_key(v) for v in values}
    extra = sorted(set(params) - set(admissible))
    if extra:
        raise SourceError(top.file, "$.tune_params", extra[0][:60], "is not named in tune_params_keys")
    return keys, admissible, params


def _problem(top: Fields) -> tuple[int, ...]:
    raw = top.raw("problem_size")
    dims = raw if isinstance(raw, list) else [raw]
    if any(isinstance(d, bool) or not isinstance(d, int) for d in dims):
        raise top.fail("problem_size", "must be an integer or an array of integers")
    return tuple(dims)


def card_of(top: Fields, card: str | None) -> str:
    name = top.obj.get("device_name")
    if name is not None and not isinstance(name, str):
        raise top.fail("device_name", "must be text")
    if not name:
        if card is None:
            raise top.fail("device_name", "is empty or missing: the card cannot be known; give it with --card NAME "
                                          "(exactly as the runtime names it, e.g. 'NVIDIA GeForce RTX 3090')")
        name = card
    elif card is not None and card != name:
        raise top.fail("device_name", f"names {name[:80]!r} but the card was given as {card[:80]!r}")
    if name != name.strip():  # leading and trailing alike: either files the rows under a name a space off
        raise top.fail("device_name", f"{name[:80]!r} begins or ends with a space: a card name does not (the "
                                      "runtime's has none); remove it")
    if not CARD_NAME_PATTERN.match(name):
        raise top.fail("device_name", f"{name[:80]!r} is not a card name (1-128 printable ASCII characters)")
    return name


def check_cache_card(name: str, file: str, stored: Iterable[str], here: str | None) -> None:
    """Refuses (SourceError at `$.device_name` of `file`) a cache's card that Emmy could not keep apart from
    another: this machine's CPU card (`here`; a Kernel Tuner cache measures a GPU, and its card row would
    describe the CPU as a GPU), or a name whose freeze file name (`card_slug`) is that of another card in
    the store or of `here`, after which `db freeze` would refuse the whole store."""
    from emmy_core.targets.resolve import card_slug

    if here is not None and name == here:
        raise SourceError(file, "$", "device_name", f"{name[:80]!r} is this machine's CPU card: a Kernel Tuner "
                                                    "cache measures a GPU; name the GPU it ran on")
    try:
        slug = card_slug(name)
    except ValueError:
        raise SourceError(file, "$", "device_name", f"{name[:80]!r} has no letters or digits to name its freeze "
                                                    "file by") from None
    for other in sorted({*stored, *([here] if here else [])}):
        if other != name and _slug_or_none(other) == slug:
            raise SourceError(file, "$", "device_name", f"{name[:80]!r} and the card {other[:80]!r} already known "
                                                        f"would share the freeze file {slug}.json; give the cache "
                                                        "the card's exact name, or one that differs in letters or "
                                                        "digits")


def _slug_or_none(name: str) -> str | None:
    from emmy_core.targets.resolve import card_slug

    try:
        return card_slug(name)
    except ValueError:
        return None


def _timestamp(value: object, file: str, ckey: str) -> _dt.datetime | None:
    """When an entry was measured (Kernel Tuner writes ISO 8601 with an offset); None when not recorded."""
    if value is None:
        return None
    try:
        at = _dt.datetime.fromisoformat(value) if isinstance(value, str) and len(value) <= 40 else None
    except ValueError:
        at = None
    if at is None or at.tzinfo is None:
        raise SourceError(file, json_path("$.cache", ckey), "timestamp", f"{str(value)[:40]!r} is not an ISO 8601 "
                                                                         "time with its UTC offset")
    return at


def median_us(times: list[float]) -> float:
    """The median of repeated samples in milliseconds, in microseconds."""
    s = sorted(times)
    n = len(s)
    mid = s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
    return mid * 1000.0


def parse_cache(doc: object, file: str, *, card: str | None = None, setting: str = "deploy") -> KernelTunerCache:
    """A Kernel Tuner cache -> the batch of its rows (without a card description: see `card_row`)."""
    top = Fields(file, "$", doc, "a Kernel Tuner cache")
    top.only(TOP_KEYS)
    objective = top.obj.get("objective", "time")
    if objective != "time":
        raise top.fail("objective", f"{str(objective)[:40]!r}: only caches tuned for time are read")
    name = card_of(top, card)
    kname = top.text("kernel_name", 64)
    keys, admissible, params = _params(top)
    kernel = Extern(kname, _problem(top), space_digest(params))  # type: ignore[arg-type]
    try:
        check_extern(kernel)
    except IRError as exc:
        raise top.fail("kernel_name" if "problem" not in str(exc) else "problem_size", str(exc)) from None
    cache = top.mapping("cache")
    batch = Batch(file)
    batch.add_kernel(kernel)
    from emmy_core.ir import kernel_id

    kid = kernel_id(kernel)
    rows: list[MeasurementRow] = []
    ok = failed = disagree = 0
    knob_names = [EXTERN_PREFIX + k for k in keys]
    _NUMBERS = {int, float}
    for ckey, entry in cache.items():
        if type(entry) is not dict:
            raise SourceError(file, json_path("$.cache", ckey), "", "an entry must be an object")
        try:
            values = [entry[k] for k in keys]
        except KeyError as exc:
            raise SourceError(file, json_path("$.cache", ckey), str(exc.args[0])[:60], "missing knob value") from None
        for k, v in zip(keys, values, strict=True):
            if isinstance(v, list | dict) or (v.__class__, v) not in admissible[k]:
                raise SourceError(file, json_path("$.cache", ckey), k[:60],
                                  f"{str(v)[:40]!r} is not among the admissible values in tune_params")
        if ",".join(map(str, values)) != ckey:
            raise SourceError(file, json_path("$.cache", ckey), "", "the key does not spell the entry's knob values")
        sched = Schedule(dict(zip(knob_names, values, strict=True)))
        at = _timestamp(entry.get("timestamp"), file, ckey)
        time = entry.get("time")
        if time.__class__ is str:
            kind = KT_FAILURES.get(time)
            if kind is None:
                raise SourceError(file, json_path("$.cache", ckey), "time",
                                  f"{time[:40]!r} is neither a number nor one of {', '.join(KT_FAILURES)}")
            rows.append(MeasurementRow.failed(kid, "", sched, name, setting, kind, source="import", measured_at=at))
            failed += 1
            continue
        if time.__class__ not in _NUMBERS:
            raise SourceError(file, json_path("$.cache", ckey), "time", "must be a number or a failure string")
        if not 0 < time < math.inf:
            raise SourceError(file, json_path("$.cache", ckey), "time", f"{str(time)[:40]} is not a positive, finite "
                                                                        "time in milliseconds")
        times = entry.get("times")
        if times.__class__ is not list or not times or len(times) > MAX_TIMES or not set(map(type, times)) <= _NUMBERS:
            raise SourceError(file, json_path("$.cache", ckey), "times", "a working entry needs its repeated samples "
                                                                         f"(1..{MAX_TIMES} numbers)")
        s = sorted(times)
        n = len(s)
        med = (s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2) * 1000.0
        if not (0 < s[0] and s[-1] < math.inf and med < PLACEHOLDER_US):
            raise SourceError(file, json_path("$.cache", ckey), "times",
                              f"samples must be positive, finite and their median below {PLACEHOLDER_US:g} us")
        if not _is_mean(time, s):
            disagree += 1
        rows.append(MeasurementRow.ok(kid, "", sched, name, setting, med, spread=(s[-1] - s[0]) * 1000.0 / med,
                                      samples=n, source="import", measured_at=at))
        ok += 1
    batch.measurements = rows
    return KernelTunerCache(name, kernel, batch, ok, failed, disagree)


def _is_mean(time: float, samples: list[float]) -> bool:
    """Whether an entry's `time` is the mean of its `times` within rounding (Kernel Tuner writes the mean)."""
    mean = math.fsum(samples) / len(samples)
    return abs(time - mean) <= MEAN_TOLERANCE * max(abs(mean), abs(time))


def card_row(name: str) -> CardRow:
    """A card's description for the store: from the GPU table when the name is known, else only its name.

    A name the table does not know is described as a `cuda` card with no numbers (unknown is NULL,
    never 0): Kernel Tuner tunes GPU kernels, and extern knobs belong to no target's vocabulary.
    """
    from emmy_core.targets import load_table

    card = load_table().get(name)
    return CardRow(name, "cuda", {}) if card is None else CardRow.from_card(card)
