"""The first option of an extern kernel: the first configuration in its Kernel Tuner cache's own order.

An extern kernel has no rule, so no first option is enumerated for it; the baseline a prior
must beat there is what a person running the tuner by hand would get first, the cache
file's first entry (Kernel Tuner writes entries in the order it measured them). The export
keeps rows, not the file's order (a schedule's identity is a digest), so the order is read
from the cache files themselves, through the importer's own strict parser: a file that is
not a Kernel Tuner cache, or does not parse, is refused naming the file, the record and
the field. The result maps (kernel, card) to each configuration's position in its file.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from emmy_core.fileio.sourcefile import SourceError

FileOrder = Mapping[tuple[str, str], Mapping[str, int]]  # (kernel_id, card) -> schedule_id -> position


def cache_files(paths: Iterable[Path | str]) -> list[Path]:
    """The files named, a folder standing for its `*.json` and `*.json.gz` files (sorted)."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(f for f in p.iterdir() if f.is_file() and f.name.endswith((".json", ".json.gz")))
        else:
            out.append(p)
    return out


def card_names(pairs: Iterable[str]) -> dict[str, str]:
    """`FILE=CARD` pairs (`--extern-card`) as {file name: card}: the card of a Kernel Tuner cache whose
    `device_name` is empty. Raises ValueError naming the pair at fault."""
    out: dict[str, str] = {}
    for given in pairs:
        name, sep, card = given.partition("=")
        card = card.strip()
        if not sep or not name or not card or "/" in name:
            raise ValueError(f"{given[:200]!r}: give FILE=CARD, FILE a cache's file name (no folder)")
        if out.setdefault(name, card) != card:
            raise ValueError(f"{name[:200]!r} is given two cards: {out[name][:80]!r} and {card[:80]!r}")
    return out


def file_order(paths: Iterable[Path | str],
               card_of: Mapping[str, str] | None = None) -> dict[tuple[str, str], dict[str, int]]:
    """Per (extern kernel_id, card): each configuration's position in its cache file (0: the first entry).
    `card_of` names, by file name, the card of a cache whose `device_name` is empty (as `--card` on import).

    Raises SourceError for a file that is not a Kernel Tuner cache, or that names a (kernel, card)
    another file named already (two orders of one pool: which is first would be a guess).
    """
    from emmy_core.fileio.filekind import is_kernel_tuner_cache
    from emmy_core.fileio.sourcefile import load_json_file
    from emmy_core.formats.kerneltuner import parse_cache
    from emmy_core.ir import kernel_id

    out: dict[tuple[str, str], dict[str, int]] = {}
    where: dict[tuple[str, str], str] = {}
    for path in cache_files(paths):
        doc = load_json_file(path)
        if not is_kernel_tuner_cache(doc):
            raise SourceError(str(path), "$", "cache", "not a Kernel Tuner cache (no cache and tune_params): it "
                                                       "gives no extern kernel's order")
        cache = parse_cache(doc, str(path), card=(card_of or {}).get(Path(path).name))
        key = (kernel_id(cache.kernel), cache.card)
        if key in out:
            raise SourceError(str(path), "$", "device_name", f"kernel {cache.kernel.name[:40]!r} on "
                                                             f"{cache.card[:60]!r} is also in {where[key][:200]}")
        positions: dict[str, int] = {}
        for row in cache.batch.measurements:
            positions.setdefault(row.knobs.schedule_id, len(positions))  # type: ignore[union-attr]
        out[key], where[key] = positions, str(path)
    return out
