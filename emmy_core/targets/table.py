"""The table of known cards (gpus.json beside this module, and user card files), loaded strictly.

The table lets Emmy describe a card that is not present (the prior builds compile
contexts for the card a golden was recorded on, never the host). Every entry carries the
text fields (`name`, `target`, `arch`, `compute_capability`, `source`), `tensor_cores` and
every numeric field of its target: `cuda` entries the GPU fields, `cpu` entries the CPU
fields (`cores`, `l1d_kib`, `l2_kib`, `l3_kib`, `simd_bits`, `freq_mhz`) with an empty
`compute_capability`; a `cpu` entry's `tensor_cores` are its matrix instructions
(`emmy_core.targets.cpu.CPU_MATRIX_INSTRUCTIONS`: `avx512_bf16`, `amx_bf16`, ...; empty: none or
unknown). A number may be `null` (unknown: a feature reads it as missing), never 0. An unknown
field, a field of the other target, a duplicate name, an instruction outside the knob vocabulary
(a GPU's) or the CPU list (a CPU's) or a non-positive number is
refused with the file, the card and the field named. Nothing half-read is returned.
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path

from emmy_core.targets.card import CPU_FIELDS, GPU_FIELDS, TARGETS, Card

TABLE_PATH = Path(__file__).with_name("gpus.json")
TABLE_FORMAT = "emmy-gpu-table"
TABLE_VERSION = 1
_TEXT_FIELDS = ("name", "target", "arch", "compute_capability", "source")
_NUMBERS_OF = {"cuda": GPU_FIELDS, "cpu": CPU_FIELDS}
_ALLOWED = {t: frozenset((*_TEXT_FIELDS, "tensor_cores", *fields)) for t, fields in _NUMBERS_OF.items()}
_MAX_TEXT = 600
MAX_TABLE_BYTES = 4 * 1024 * 1024


class CardTableError(ValueError):
    """A card table is malformed; the message names the file, the card and the field."""


def _number(where: str, field: str, value: object, kind: type) -> int | float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CardTableError(f"{where}: field {field!r} must be a number, not {type(value).__name__}")
    if kind is int and not isinstance(value, int):
        raise CardTableError(f"{where}: field {field!r} must be an integer, not {value!r}")
    if isinstance(value, int) and abs(value) > 2**53:
        raise CardTableError(f"{where}: field {field!r} is an integer of {len(str(abs(value)))} digits: out of range "
                             "for a hardware figure (at most 2**53)")
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
    target = entry["target"]
    if target not in TARGETS:
        raise CardTableError(f"{where}: field 'target' must be one of {', '.join(TARGETS)}, not {target[:20]!r}")
    extra = sorted(set(entry) - _ALLOWED[target], key=str)
    if extra:
        if any(extra[0] in f for f in _NUMBERS_OF.values()):
            raise CardTableError(f"{where}: field {extra[0]!r} is not a field of a {target} card "
                                 f"(field 'target' says {target!r})")
        raise CardTableError(f"{where}: unknown field {str(extra[0])[:40]!r}")
    tcs = entry.get("tensor_cores")
    if not isinstance(tcs, list) or not all(isinstance(t, str) for t in tcs):
        raise CardTableError(f"{where}: field 'tensor_cores' must be a list of instruction names")
    from emmy_core.knobs.vocab import TENSOR_CORE_INSTRUCTIONS  # knobs builds on targets: read it late
    from emmy_core.targets.cpu import CPU_MATRIX_INSTRUCTIONS

    for t in tcs:
        if target == "cpu" and t not in CPU_MATRIX_INSTRUCTIONS:
            raise CardTableError(f"{where}: field 'tensor_cores': {t[:40]!r} is not a CPU matrix instruction "
                                 f"({', '.join(CPU_MATRIX_INSTRUCTIONS)})")
        if target != "cpu" and (t not in TENSOR_CORE_INSTRUCTIONS or t == "none"):
            raise CardTableError(f"{where}: field 'tensor_cores': {t[:40]!r} is not a tensor-core instruction "
                                 f"of the knob vocabulary")
    if len(set(tcs)) != len(tcs):
        raise CardTableError(f"{where}: field 'tensor_cores' names an instruction twice")
    numbers: dict[str, int | float | None] = {}
    for field, (kind, _doc) in _NUMBERS_OF[target].items():
        if field not in entry:
            raise CardTableError(f"{where}: field {field!r} is missing (write null when it is unknown)")
        numbers[field] = _number(where, field, entry[field], kind)
    cc = entry["compute_capability"]
    if target == "cpu":
        if cc:
            raise CardTableError(f"{where}: a cpu card has an empty 'compute_capability'")
    else:
        block, sm = numbers["smem_per_block_kib"], numbers["smem_per_sm_kib"]
        if block is not None and sm is not None and block > sm:
            raise CardTableError(f"{where}: field 'smem_per_block_kib' exceeds smem_per_sm_kib")
        if not (cc.startswith("gfx") or (cc.count(".") == 1 and cc.replace(".", "").isdigit())):
            raise CardTableError(f"{where}: field 'compute_capability' must be MAJOR.MINOR or a gfx arch, "
                                 f"not {cc[:40]!r}")
    return Card(name=name, target=target, arch=entry["arch"], compute_capability=cc, tensor_cores=tuple(tcs),
                source=entry["source"], **numbers)


def load_table(path: Path | str | None = None) -> dict[str, Card]:
    """Reads a card table strictly: name -> Card, in file order. Default: the packaged gpus.json only
    (`emmy_core.targets.user_cards.known_table` adds the user's card file)."""
    if path is None:
        return dict(_default_table())
    return _load(Path(path), str(path))


@lru_cache(maxsize=1)
def _default_table() -> tuple[tuple[str, Card], ...]:
    return tuple(_load(TABLE_PATH, TABLE_PATH.name).items())


def _load(path: Path, file: str) -> dict[str, Card]:
    """Reads `path`; messages call it `file` (the packaged table by its name, a user's file as given)."""
    from emmy_core.fileio.inputfile import InputFileError, read_input
    from emmy_core.fileio.sourcefile import SourceError, loads_strict

    try:  # strict JSON: UTF-8, no repeated key, no NaN, not nested too deeply (a SourceError naming `file`)
        doc = loads_strict(read_input(path, MAX_TABLE_BYTES, "card table"), file)
    except InputFileError as exc:
        raise CardTableError(f"{file}: {str(exc).removeprefix(f'{path}: ')}") from None
    except SourceError as exc:
        raise CardTableError(str(exc)) from None
    if not isinstance(doc, dict):
        raise CardTableError(f"{file}: must hold a JSON object")
    if doc.get("format") != TABLE_FORMAT:
        raise CardTableError(f"{file}: field 'format' must be {TABLE_FORMAT!r}")
    if doc.get("version") != TABLE_VERSION:
        raise CardTableError(f"{file}: field 'version' is {str(doc.get('version'))[:20]!r}; this code reads "
                             f"{TABLE_VERSION}")
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
            raise CardTableError(f"{file}: card {card.name[:80]!r}: field 'name' appears twice")
        out[card.name] = card
    return out
