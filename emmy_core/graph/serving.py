"""The serving matrix: the models, shapes, cards and settings the release gate compiles.

It is a committed file (`serving_matrix.json` beside this module) read strictly: exact
keys, known model names (`models.MODEL_NAMES`), shapes with exactly `B` and `S`,
known cards (`local` or a name of the GPU table), settings from `MATRIX_SETTINGS`, no
duplicates. A model may be listed once per dtype (a real decoder is served in f32 and
in bf16). An error names the file, the record and the field at fault.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from emmy_core.dtypes import MODEL_DTYPES

SERVING_MATRIX_VERSION = 1
MATRIX_SETTINGS = ("deploy", "rank")
MAX_BYTES = 1 << 20
MAX_SIZE = 1 << 20
DEFAULT_PATH = Path(__file__).with_name("serving_matrix.json")


class ServingMatrixError(ValueError):
    """A serving matrix that breaks a rule; the message names file, record and field."""


@dataclass(frozen=True)
class ServingModel:
    name: str
    dtype: str
    shapes: tuple[tuple[tuple[str, int], ...], ...]  # each (("B", b), ("S", s))


@dataclass(frozen=True)
class ServingCase:
    model: str
    dtype: str
    shape: tuple[tuple[str, int], ...]
    card: str
    setting: str


@dataclass(frozen=True)
class ServingMatrix:
    version: int
    models: tuple[ServingModel, ...]
    cards: tuple[str, ...]
    settings: tuple[str, ...]

    def cases(self) -> tuple[ServingCase, ...]:
        """Every (model, shape, card, setting) the gate covers, in file order."""
        return tuple(ServingCase(m.name, m.dtype, shape, card, setting)
                     for m in self.models for shape in m.shapes for card in self.cards for setting in self.settings)


def _no_duplicate_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"key {k!r} appears twice")
        out[k] = v
    return out


def _refuse_constant(token: str) -> object:
    raise ValueError(f"{token} is not a JSON number")


def _keys(obj: object, want: tuple[str, ...], where: str) -> dict[str, object]:
    if not isinstance(obj, dict):
        raise ServingMatrixError(f"{where}: must be an object, got {type(obj).__name__}")
    missing = [k for k in want if k not in obj]
    extra = sorted(str(k) for k in obj if k not in want)
    if missing:
        raise ServingMatrixError(f"{where}: missing field(s) {', '.join(missing)}")
    if extra:
        raise ServingMatrixError(f"{where}: unknown field(s) {', '.join(extra)[:200]}")
    return obj


def _list(obj: object, where: str) -> list[object]:
    if not isinstance(obj, list) or not obj:
        raise ServingMatrixError(f"{where}: must be a non-empty list")
    return obj


def _int(v: object, where: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= MAX_SIZE:
        raise ServingMatrixError(f"{where}: must be an integer in 1..{MAX_SIZE}, got {str(v)[:40]}")
    return v


def parse_serving_matrix(text: bytes | str, source: str = "<serving matrix>") -> ServingMatrix:
    """Strictly reads serving-matrix JSON; raises `ServingMatrixError` naming source, record and field."""
    from emmy_core.graph.models import MODEL_NAMES
    from emmy_core.targets.resolve import LOCAL, known_cards

    if len(text) > MAX_BYTES:
        raise ServingMatrixError(f"{source}: larger than {MAX_BYTES} bytes")
    try:
        raw = json.loads(text, object_pairs_hook=_no_duplicate_keys, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:  # RecursionError: arrays or objects nested too deeply
        raise ServingMatrixError(f"{source}: not valid JSON: {str(exc)[:200]}") from None
    top = _keys(raw, ("version", "models", "cards", "settings"), source)
    if top["version"] != SERVING_MATRIX_VERSION or isinstance(top["version"], bool):
        raise ServingMatrixError(f"{source}: field version: must be {SERVING_MATRIX_VERSION}, got "
                                 f"{str(top['version'])[:20]}")
    models: list[ServingModel] = []
    for i, rec in enumerate(_list(top["models"], f"{source}: field models")):
        where = f"{source}: models[{i}]"
        m = _keys(rec, ("name", "dtype", "shapes"), where)
        if m["name"] not in MODEL_NAMES:
            raise ServingMatrixError(f"{where}: field name: unknown model {str(m['name'])[:60]!r}; known: "
                                     f"{', '.join(MODEL_NAMES)}")
        if m["dtype"] not in MODEL_DTYPES:
            raise ServingMatrixError(f"{where}: field dtype: must be one of {', '.join(MODEL_DTYPES)}")
        if any(x.name == m["name"] and x.dtype == m["dtype"] for x in models):
            raise ServingMatrixError(f"{where}: field name: model {m['name']!r} listed twice in {m['dtype']}")
        shapes: list[tuple[tuple[str, int], ...]] = []
        for j, s in enumerate(_list(m["shapes"], f"{where}: field shapes")):
            sw = f"{where}: shapes[{j}]"
            d = _keys(s, ("B", "S"), sw)
            shape = (("B", _int(d["B"], f"{sw}: field B")), ("S", _int(d["S"], f"{sw}: field S")))
            if shape in shapes:
                raise ServingMatrixError(f"{sw}: shape B={shape[0][1]},S={shape[1][1]} listed twice")
            shapes.append(shape)
        models.append(ServingModel(str(m["name"]), str(m["dtype"]), tuple(shapes)))
    known = (LOCAL, *known_cards())
    cards: list[str] = []
    for i, c in enumerate(_list(top["cards"], f"{source}: field cards")):
        if not isinstance(c, str) or c not in known:
            raise ServingMatrixError(f"{source}: cards[{i}]: unknown card {str(c)[:80]!r}; known: {', '.join(known)}")
        if c in cards:
            raise ServingMatrixError(f"{source}: cards[{i}]: card {c!r} listed twice")
        cards.append(c)
    settings: list[str] = []
    for i, s in enumerate(_list(top["settings"], f"{source}: field settings")):
        if s not in MATRIX_SETTINGS or s in settings:
            raise ServingMatrixError(f"{source}: settings[{i}]: must be one of {', '.join(MATRIX_SETTINGS)}, once each")
        settings.append(str(s))
    return ServingMatrix(SERVING_MATRIX_VERSION, tuple(models), tuple(cards), tuple(settings))


def load_serving_matrix(path: Path | str | None = None) -> ServingMatrix:
    """The committed serving matrix (or the one at `path`), read strictly: a regular file of at most
    `MAX_BYTES` (a FIFO, a device or a larger file is refused unread: `emmy_core.fileio.inputfile`)."""
    from emmy_core.fileio.inputfile import InputFileError, read_input

    p = Path(path) if path is not None else DEFAULT_PATH
    try:
        data = read_input(p, MAX_BYTES, "serving matrix")
    except InputFileError as exc:
        raise ServingMatrixError(f"{p.name}: cannot read: {str(exc).removeprefix(f'{p}: ')}") from None
    return parse_serving_matrix(data, p.name)
