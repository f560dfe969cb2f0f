"""The table of known GPUs (gpus.json beside this module), loaded strictly.

The table lets Emmy describe a card that is not present (the prior builds compile
contexts for the card a golden was recorded on, never the host). Every entry must carry
every field with the right type; an unknown field, a duplicate name, a tensor-core
instruction outside the knob vocabulary or a non-positive number is refused with the
file, the card and the field named. Nothing half-read is returned.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path

from emmy_core.targets.card import GPU_FIELDS, Card

TABLE_PATH = Path(__file__).with_name("gpus.json")
TABLE_FORMAT = "emmy-gpu-table"
TABLE_VERSION = 1
_TEXT_FIELDS = ("name", "target", "arch", "compute_capability", "source")
_ALLOWED = frozenset((*_TEXT_FIELDS, "tensor_cores", *GPU_FIELDS))
_MAX_TEXT = 600


class CardTableError(ValueError):
    """The GPU table is malformed; the message names the file, the card and the field."""


def _number(where: str, field: str, value: object, kind: type) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CardTableError(f"{where}: field {field!r} must be a number, not {type(value).__name__}")
    if kind is int and not isinstance(value, int):
        raise CardTableError(f"{where}: field {field!r} must be an integer, not {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise CardTableError(f"{where}: field {field!r} must be positive and finite, not {value!r}")
    return int(value) if kind is int else float(value)


def _card(file: str, index: int, entry: object) -> Card:
    where = f"{file}: card #{index}"
    if not isinstance(entry, dict):
        raise CardTableError(f"{where}: must be an object, not {type(entry).__name__}")
    name = entry.get("name")
    if isinstance(name, str) and name.strip():
        where = f"{file}: card {name[:80]!r}"
    for field in _TEXT_FIELDS:
        value = entry.get(field)
        if field not in entry:
            raise CardTableError(f"{where}: field {field!r} is missing")
        if not isinstance(value, str) or len(value) > _MAX_TEXT or (field != "compute_capability" and not value):
            raise CardTableError(f"{where}: field {field!r} must be non-empty text under {_MAX_TEXT} characters")
    if name != name.strip() or "  " in name or any(not c.isprintable() for c in name):
        raise CardTableError(f"{where}: field 'name' has stray whitespace or unprintable characters")
    if entry["target"] != "cuda":
        raise CardTableError(f"{where}: field 'target' must be 'cuda' in the GPU table")
    extra = sorted(set(entry) - _ALLOWED, key=str)
    if extra:
        raise CardTableError(f"{where}: unknown field {extra[0]!r}")
    tcs = entry.get("tensor_cores")
    if not isinstance(tcs, list) or not all(isinstance(t, str) for t in tcs):
        raise CardTableError(f"{where}: field 'tensor_cores' must be a list of instruction names")
    from emmy_core.knobs.vocab import TENSOR_CORE_INSTRUCTIONS  # knobs builds on targets: read it late

    for t in tcs:
        if t not in TENSOR_CORE_INSTRUCTIONS or t == "none":
            raise CardTableError(f"{where}: field 'tensor_cores': {t[:40]!r} is not a tensor-core instruction "
                                 f"of the knob vocabulary")
    if len(set(tcs)) != len(tcs):
        raise CardTableError(f"{where}: field 'tensor_cores' names an instruction twice")
    numbers: dict[str, int | float] = {}
    for field, (kind, _doc) in GPU_FIELDS.items():
        if field not in entry:
            raise CardTableError(f"{where}: field {field!r} is missing")
        numbers[field] = _number(where, field, entry[field], kind)
    if numbers["smem_per_block_kib"] > numbers["smem_per_sm_kib"]:
        raise CardTableError(f"{where}: field 'smem_per_block_kib' exceeds smem_per_sm_kib")
    cc = entry["compute_capability"]
    if not (cc.startswith("gfx") or (cc.count(".") == 1 and cc.replace(".", "").isdigit())):
        raise CardTableError(f"{where}: field 'compute_capability' must be MAJOR.MINOR or a gfx arch, not {cc!r}")
    return Card(name=name, target="cuda", arch=entry["arch"], compute_capability=cc, tensor_cores=tuple(tcs),
                source=entry["source"], **numbers)


def load_table(path: Path | str | None = None) -> dict[str, Card]:
    """Reads a GPU table strictly: name -> Card, in file order. Default: the packaged gpus.json."""
    if path is None:
        return dict(_default_table())
    return _load(Path(path))


@lru_cache(maxsize=1)
def _default_table() -> tuple[tuple[str, Card], ...]:
    return tuple(_load(TABLE_PATH).items())


def _load(path: Path) -> dict[str, Card]:
    file = path.name
    try:
        doc = json.loads(path.read_bytes().decode("utf-8"), parse_constant=_refuse_constant)
    except OSError as exc:
        raise CardTableError(f"{file}: cannot read: {exc.strerror or exc}") from exc
    except (UnicodeDecodeError, ValueError) as exc:
        raise CardTableError(f"{file}: not valid JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise CardTableError(f"{file}: must hold a JSON object")
    if doc.get("format") != TABLE_FORMAT:
        raise CardTableError(f"{file}: field 'format' must be {TABLE_FORMAT!r}")
    if doc.get("version") != TABLE_VERSION:
        raise CardTableError(f"{file}: field 'version' is {doc.get('version')!r}; this code reads {TABLE_VERSION}")
    extra = sorted(set(doc) - {"format", "version", "note", "cards"}, key=str)
    if extra:
        raise CardTableError(f"{file}: unknown field {extra[0]!r}")
    entries = doc.get("cards")
    if not isinstance(entries, list) or not entries:
        raise CardTableError(f"{file}: field 'cards' must be a non-empty list")
    out: dict[str, Card] = {}
    for i, entry in enumerate(entries):
        card = _card(file, i, entry)
        if card.name in out:
            raise CardTableError(f"{file}: card {card.name!r}: field 'name' appears twice")
        out[card.name] = card
    return out


def _refuse_constant(token: str) -> object:
    raise ValueError(f"{token} is not a number JSON allows")
