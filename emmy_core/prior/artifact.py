"""The prior's artifact (one JSON file) and the object that scores with it.

The file: `format` (`emmy-prior`), `feature_version`, `features` (the column names, in the
model's order), `provenance` (dataset digest, parameters, code revision; no time: `emmy_core.prior.provenance`),
`metrics` (the fit's headline figures), `calibration` (the price curves, `emmy_core.prior.price`),
`model`: the trees in CatBoost's own JSON format (`features_info`, `oblivious_trees`,
`scale_and_bias`), `transfer`: the table of what the fit's cards measured, read for the `tr.*`
features (`emmy_core.prior.transfer_features`), and `ranking`: what the fit selected on the card split
to rank a card it never saw (the rule's first-option order, a transfer order, a blend of the ranker
and a transfer order, or the ranker alone: `emmy_core.prior.ranking`), what ranks a pool no other
card measured (`no_evidence`) and how many places at the top of the shipped order are spread over knob
values (`diverse`, `ranking.diversified`), with the figures it was selected on and its margins to the
others. `score` computes exactly that for a card the fit never
saw, and the ranker alone for a card it measured (what the kernel split validates). Loading is strict (seed 08: "refit it, never silently continue with
something else"): a missing or malformed file, or one written under another feature
version, is a `PriorError` naming the file (and both versions). Scoring needs numpy only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from emmy_core.ir import Extern, Program, format_sizes, kernel_id
from emmy_core.knobs.vocab import schedule_id
from emmy_core.prior.features import FEATURE_VERSION, fork_features
from emmy_core.prior.geometry import knob_features
from emmy_core.prior.price import Curve, curve_key, price, read_curves, scale_of
from emmy_core.prior.ranking import FIRST, NO_EVIDENCE, RANKER, SOURCES, mode_of, ranked
from emmy_core.prior.transfer_features import TransferTable, read_table, short_sid
from emmy_core.prior.trees import ModelFormatError, Trees, parse_model
from emmy_core.targets.card import Card

ARTIFACT_FORMAT = "emmy-prior"
MAX_ARTIFACT_BYTES = 64 * 1024 * 1024
MAX_FEATURES = 4096
MAX_DIVERSE = 64  # the most places at the top of an order an artifact may ask to spread
_KEYS = frozenset({"format", "feature_version", "features", "provenance", "metrics", "calibration", "model",
                   "transfer", "ranking"})


class PriorError(ValueError):
    """The prior cannot be used: the message names the file and, for a version mismatch, both versions."""


class Prior:
    """A loaded prior: scores and prices a fork's candidates (higher score is better; lower price is)."""

    def __init__(self, doc: Mapping[str, Any], source: str) -> None:
        self.source = source
        self.doc = dict(doc)
        self.features: tuple[str, ...] = tuple(doc["features"])
        self.trees: Trees = parse_model(doc["model"], len(self.features))
        self.curves: dict[str, Curve] = read_curves(doc["calibration"], "$.calibration")
        self.table: TransferTable = read_table(doc["transfer"], "$.transfer")
        self.blend, self.weight, self.no_evidence, self.diverse = read_ranking(doc["ranking"])
        self._transfer_column = self.features.index(self.blend) if self.blend in self.features else None
        self._knob_columns = knob_features(self.features)
        self._library_cards: frozenset[str] | None = None  # the cards the fit measured torch's kernel on

    @property
    def info(self) -> dict[str, Any]:
        """feature_version, provenance, feature names, headline metrics, trees, the price curves, the ranking
        the fit selected and the size of its transfer table."""
        return {"feature_version": self.doc["feature_version"], "provenance": self.doc["provenance"],
                "features": list(self.features), "metrics": self.doc["metrics"],
                "trees": int(self.trees.level_feature.shape[0]), "depth": int(self.trees.level_feature.shape[1]),
                "calibration": {k: c.to_json() for k, c in self.curves.items()}, "source": self.source,
                "ranking": self.doc["ranking"],
                "transfer": {"pools": len(self.table.pools), "cards": sorted(self.table.cards)}}

    def transfer(self, kernel: Program | Extern, sizes: Mapping[str, int] | str | None, card: Card | None,
                 setting: str, candidates: Sequence[Mapping[str, object]]) -> np.ndarray | None:
        """The candidates' `tr.*` columns from this prior's table (the card's own rows left out), or None
        when no other card of the table measured this kernel at these sizes under this setting."""
        if not self.table.pools:
            return None
        kid, text = kernel_id(kernel), sizes_text(kernel, sizes)
        name = card.name if card is not None else None
        if not self.table.has(kid, text, setting, name):
            return None
        numbers = card.numeric() if card is not None else None
        return self.table.columns(kid, text, setting, numbers, name, [schedule_id(dict(c)) for c in candidates])

    def rows(self, kernel: Program | Extern, sizes: Mapping[str, int] | str | None, card: Card | None,
             setting: str, candidates: Sequence[Mapping[str, object]],
             knobs: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
        """The feature rows of `candidates`, in this prior's column order (`knobs`: their `knob_columns`, kept by
        a caller that scores one pool at many sizes)."""
        return fork_features(kernel, sizes, card, setting, candidates,
                             self.transfer(kernel, sizes, card, setting, candidates), knobs).matrix(self.features)

    def unseen_knobs(self) -> frozenset[str]:
        """Emmy's schedule knobs this prior has no feature for (appended after its fit: `dot`): it ranks candidates
        as if they did not differ there (`emmy_core.evidence.sources.within_sight` leaves them to the rule)."""
        from emmy_core.knobs.vocab import SCHEDULE_KNOBS

        return frozenset(n for n, spec in SCHEDULE_KNOBS.items() if spec.target in ("cpu", "cuda") and n != "mma"
                         and f"k.{n}" not in self.features)

    def sees_library(self, card: Card | None) -> bool:
        """Whether this prior ranks torch's own kernel beside Emmy's on `card`: it has the route's feature
        (`k.library`) and its fit measured the library, at this torch's release, on this very card. Where the
        library was measured on other cards only, what it learned there does not carry: the libraries differ
        most by maker and generation, the very facts a card of its own describes, and a wrong guess makes a
        product slower than not compiling; so elsewhere the route stays with measurement (and torch's kernel,
        the first option)."""
        if card is None or "k.library" not in self.features:
            return False
        if self._library_cards is None:
            from emmy_core.knobs.route import library_knobs

            lib = short_sid(schedule_id(library_knobs()))
            self._library_cards = frozenset(c for pool in self.table.pools.values()
                                             for c, ratios in pool.items() if lib in ratios)
        return card.name in self._library_cards

    def seen(self, card: Card | None) -> bool:
        """Whether the fit measured `card` (its table holds the card's name): a seen card is ranked by the
        model alone (validated on the kernel split), an unseen one by the blend selected on the card split."""
        return card is not None and card.name in self.table.cards

    def score_rows(self, rows: np.ndarray, card: Card | None = None, ordered: bool = True) -> np.ndarray:
        """The scores of one pool's rows on `card`: the trees, blended with the rows' transfer column as the
        fit selected for a card it never saw (`seen`); `card` None is a card described nowhere (unseen).
        `ordered`: the rows are in the rule's order (`score`)."""
        return self.scored(rows, card, ordered)[0]

    def scored(self, rows: np.ndarray, card: Card | None = None,
               ordered: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """`score_rows`, and the trees' own scores of the same rows (what `price_rows` reads; the same array
        where the shipped ranking is the trees alone): a resolver that scores a pool and then prices its top
        predicts once."""
        own = self.trees.predict(rows)
        if self.model_alone(card):
            return own, own
        transfer = None if self._transfer_column is None else rows[:, self._transfer_column]
        return ranked(self.blend, self.weight, own, transfer, None, self.no_evidence, ordered,
                      rows[:, self._knob_columns], self.diverse), own

    def model_alone(self, card: Card | None) -> bool:
        """Whether `score_rows` is the trees alone for every pool of `card` (the scale the price curves are
        fitted on): a seen card's, or an unseen one's where the fit shipped the ranker alone and spreads no
        head (`ranking.diversified` permutes the scores)."""
        if self.seen(card):
            return True
        return self.blend != FIRST and self.no_evidence == RANKER and self.diverse == 0 and (
            self._transfer_column is None or self.weight <= 0)

    def score(self, kernel: Program | Extern, sizes: Mapping[str, int] | str | None, card: Card | None,
              setting: str, candidates: Sequence[Mapping[str, object]], ordered: bool = True) -> np.ndarray:
        """One float64 score per candidate; higher is better. `card` None: a card described nowhere.
        `ordered`: the candidates are in the rule's order, its first option first (what a compile passes);
        False for a pool no rule ordered (an imported Kernel Tuner cache: `ranking.ranked`)."""
        if not candidates:
            return np.zeros(0)
        return self.score_rows(self.rows(kernel, sizes, card, setting, candidates), card, ordered)

    def price(self, kernel: Program | Extern, sizes: Mapping[str, int] | str | None, card: Card | None,
              setting: str, candidates: Sequence[Mapping[str, object]]) -> np.ndarray:
        """A latency stand-in per candidate, µs (lower is better), comparable and summable across kernels.

        `exp(a + b * score + c * scale)` with the curve of the card's target (`emmy_core.prior.price`
        says how it is calibrated); a prior with no calibration for the target uses its `any` curve,
        and one with none at all `exp(-score)` (ordered, not calibrated: `info` shows the curves).
        """
        if not candidates:
            return np.zeros(0)
        rows = self.rows(kernel, sizes, card, setting, candidates)
        return self.price_rows(kernel, card, rows, self.score_rows(rows, card))

    def price_rows(self, kernel: Program | Extern, card: Card | None, rows: np.ndarray,
                   scores: np.ndarray, own: np.ndarray | None = None) -> np.ndarray:
        """`price` of rows already built and scored (a resolver prices the top of a pool it scored). The
        curves are fitted on the trees' scores: where the shipped ranking is another (the rule's order, a
        transfer order or blend), the rows are priced from the trees' own scores (`own`, as `scored` gave
        them, else predicted again)."""
        key = curve_key(card.target if card is not None else None, isinstance(kernel, Extern))
        if own is None:
            own = scores if self.model_alone(card) else self.trees.predict(rows)
        return price(self.curves, key, own, scale_of(rows, self.features))


def computed_feature(name: str) -> bool:
    """Whether this Emmy computes the feature `name` (the fixed names of this feature version, or an
    extern knob's `x.*`): a prior over names it does not compute would see only missing values."""
    from emmy_core.prior.features import HW_NAMES, REGIME_NAMES, ST_NAMES
    from emmy_core.prior.geometry import EXTERN_FEATURE_PREFIX, GEOMETRY_NAMES, KNOB_NAMES
    from emmy_core.prior.transfer_features import TRANSFER_NAMES

    if name.startswith(EXTERN_FEATURE_PREFIX):
        return len(name) > len(EXTERN_FEATURE_PREFIX)
    return name in {*HW_NAMES, *REGIME_NAMES, *ST_NAMES, *KNOB_NAMES, *GEOMETRY_NAMES, *TRANSFER_NAMES}


def sizes_text(kernel: Program | Extern, sizes: Mapping[str, int] | str | None) -> str:
    """The sizes as the store keys a pool: text as given, a mapping kept to the kernel's dynamic axes."""
    if sizes is None:
        return ""
    if isinstance(sizes, str):
        return sizes
    if isinstance(kernel, Extern):
        return format_sizes({str(k): int(v) for k, v in sizes.items()})
    dyn = {a.name for a in kernel.dynamic_axes}
    return format_sizes({str(k): int(v) for k, v in sizes.items() if k in dyn})


def read_ranking(doc: object) -> tuple[str, float, str, int]:
    """The choice of an artifact's `ranking` field: (`first` or a transfer column, weight, what ranks a pool
    no other card measured, how many places at the top of the shipped order are spread: `ranking.diversified`);
    ValueError naming the field. An artifact fitted before `no_evidence` was selected ranked such pools by
    the ranker alone, and one fitted before `diverse` spread nothing, and each is read so: that is what it
    was validated with."""
    if not isinstance(doc, Mapping) or not isinstance(doc.get("weight"), int | float) or isinstance(
            doc.get("weight"), bool) or not 0 <= doc["weight"] <= 1:
        raise ValueError("$.ranking.weight must be a number in 0..1")
    if doc.get("source") not in (FIRST, *SOURCES):
        raise ValueError(f"$.ranking.source must be one of {', '.join((FIRST, *SOURCES))}")
    if doc["source"] == FIRST and doc["weight"] != 1:
        raise ValueError(f"$.ranking.weight must be 1 for source {FIRST!r}")
    want = mode_of(float(doc["weight"]), str(doc["source"]))
    if doc.get("mode") != want:
        raise ValueError(f"$.ranking.mode must be {want!r} for source {doc['source']} and weight {doc['weight']}")
    bare = doc.get("no_evidence", RANKER)
    if bare not in NO_EVIDENCE:
        raise ValueError(f"$.ranking.no_evidence must be one of {', '.join(NO_EVIDENCE)}")
    head = doc.get("diverse", 0)
    if isinstance(head, bool) or not isinstance(head, int) or not 0 <= head <= MAX_DIVERSE:
        raise ValueError(f"$.ranking.diverse must be an integer in 0..{MAX_DIVERSE}")
    return str(doc["source"]), float(doc["weight"]), str(bare), head


def _refuse(path: str, why: str) -> PriorError:
    return PriorError(f"{path}: {why}")


def _parse(doc: object, path: str) -> Prior:
    if not isinstance(doc, dict):
        raise _refuse(path, "not a prior artifact (the JSON is not an object)")
    if doc.get("format") != ARTIFACT_FORMAT:
        raise _refuse(path, f"$.format is {str(doc.get('format'))[:40]!r}, not {ARTIFACT_FORMAT!r}")
    version = doc.get("feature_version")
    if isinstance(version, bool) or not isinstance(version, int):
        shown = "missing" if "feature_version" not in doc else f"{type(version).__name__} {str(version)[:20]!r}"
        raise _refuse(path, f"$.feature_version must be an integer, not {shown} (this Emmy computes feature "
                            f"version {FEATURE_VERSION})")
    if version != FEATURE_VERSION:
        raise _refuse(path, f"written with feature version {str(version)[:20]}; this Emmy computes feature version "
                            f"{FEATURE_VERSION} (refit it: emmy fit DATASET OUT.json, or emmy fit --install)")
    missing = sorted(_KEYS - set(doc))
    if missing:
        raise _refuse(path, f"$.{missing[0]} is missing")
    extra = sorted(set(doc) - _KEYS)
    if extra:
        raise _refuse(path, f"$.{str(extra[0])[:40]} is not a field of a prior artifact")
    names = doc["features"]
    if not isinstance(names, list) or not 0 < len(names) <= MAX_FEATURES or not all(
            isinstance(n, str) and 0 < len(n) <= 80 for n in names) or len(set(names)) != len(names):
        raise _refuse(path, f"$.features must be 1..{MAX_FEATURES} distinct names of at most 80 characters")
    unknown = [n for n in names if not computed_feature(n)]
    if unknown:
        raise _refuse(path, f"$.features names {unknown[0][:80]!r} (and {len(unknown) - 1} more), which this Emmy "
                            f"does not compute at feature version {FEATURE_VERSION}: every candidate would score "
                            "alike on it (refit it with this version)")
    for field in ("provenance", "metrics", "ranking"):
        if not isinstance(doc[field], dict):
            raise _refuse(path, f"$.{field} must be an object")
    model = doc["model"]
    trees = model.get("oblivious_trees") if isinstance(model, dict) else None
    if isinstance(trees, list) and not trees:
        raise _refuse(path, "$.model.oblivious_trees is empty: a prior with no trees scores every candidate "
                            "alike, so it cannot rank anything")
    try:
        return Prior(doc, path)
    except (ModelFormatError, ValueError) as exc:
        raise _refuse(path, str(exc)) from None


def load_prior(path: Path | str) -> Prior:
    """Reads a prior artifact strictly; PriorError naming the file when it cannot be used (the JSON read by
    `emmy_core.fileio.sourcefile.loads_strict`: UTF-8, no repeated key, no NaN, not nested too deeply)."""
    from emmy_core.fileio.inputfile import InputFileError, read_input
    from emmy_core.fileio.sourcefile import SourceError, loads_strict

    p = Path(path)
    if not p.exists() and not p.is_symlink():
        raise _refuse(str(p), "no such prior artifact (fit one: emmy fit DATASET OUT.json)")
    try:
        doc = loads_strict(read_input(p, MAX_ARTIFACT_BYTES, "prior artifact"), str(p))
    except (InputFileError, SourceError) as exc:
        raise PriorError(str(exc)) from None
    return _parse(doc, str(p))


def _no_constant(token: str) -> float:
    raise ValueError(f"{token} is not a number JSON allows")


def installed_prior_path() -> Path:
    """The prior that ships inside the package (fitted on the repository freeze)."""
    return Path(__file__).with_name("installed.json")


def load_installed_prior() -> Prior:
    """The installed prior, strictly (PriorError when it is missing or stale)."""
    return load_prior(installed_prior_path())


def artifact_text(doc: Mapping[str, Any]) -> str:
    """Canonical text of an artifact: sorted keys, one line per top-level field, a trailing newline."""
    body = ",\n".join(f"{json.dumps(k)}: {json.dumps(doc[k], sort_keys=True, separators=(',', ':'), allow_nan=False)}"
                      for k in sorted(doc))
    return "{\n" + body + "\n}\n"


def is_installed_path(out: Path | str) -> bool:
    """Whether `out` is the shipped prior (however the path is spelled)."""
    try:
        return Path(out).resolve() == installed_prior_path().resolve()
    except OSError:
        return False


def check_artifact_out(out: Path | str, *, install: bool = False) -> None:
    """Refuses an artifact's output before any work: the installed prior unless `install` (only
    `emmy fit --install` and the chain's install step, after its gate, replace it), and any file of
    another kind (FileWriteError: an output replaces only a file of its own kind)."""
    from emmy_core.fileio.filekind import check_output

    if is_installed_path(out) and not install:
        raise PriorError(f"{out}: is the installed prior; it is replaced only by `emmy fit --install` or the "
                         "chain's install step (after its evaluation gate): write the fit elsewhere")
    if not install:
        check_output(Path(out), ARTIFACT_FORMAT, "a prior artifact", max_bytes=MAX_ARTIFACT_BYTES)


def write_artifact(doc: Mapping[str, Any], out: Path | str, *, install: bool = False) -> Path:
    """Writes an artifact atomically: checked by the loader's own rules first (never replace a working
    prior by one that does not load), then a temporary file beside `out` and a rename
    (`emmy_core.fileio.safefile`). `out` must be absent or a prior artifact, and not the installed prior
    unless `install` (see `check_artifact_out`)."""
    from emmy_core.fileio.safefile import atomic_write_text

    out = Path(out)
    check_artifact_out(out, install=install)
    text = artifact_text(doc)
    _parse(json.loads(text, parse_constant=_no_constant), str(out))
    atomic_write_text(out, text)
    return out
