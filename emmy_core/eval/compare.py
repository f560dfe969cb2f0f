"""`emmy eval compare A.json B.json`: two evaluation reports side by side, with the change per card.

How a person decides whether a new fit replaces the installed one: the same dataset evaluated
with each prior, then compared. A report file is untrusted like any other file: it is read
strictly (the format and version of `EvalReport.to_json`, every figure a number or null) and
refused naming the file, the record and the field; a report of another version names both.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from emmy_core.eval.report import REPORT_FORMAT, REPORT_VERSION, VIEWS, EvalReport
from emmy_core.eval.tables import compare_text
from emmy_core.fileio.sourcefile import Fields, json_path

MAX_REPORT_BYTES = 256 * 1024 * 1024
TOP = frozenset({"format", "version", "feature_version", "dataset_digest", "pools", "prior", "minimum_sizes", "mean",
                 "by_card", "by_family", "forks", "undescribed_pools", "undescribed_cards", "extern_order", "per_pool"})


def _summary(file: str, record: str, obj: object) -> dict[str, Any]:
    f = Fields(file, record, obj, "a summary")
    for key, value in f.obj.items():
        if not isinstance(key, str) or len(key) > 80:
            raise f.fail(str(key)[:40], "a figure's name must be text of at most 80 characters")
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise f.fail(key, "must be a number or null")
        if isinstance(value, int) and abs(value) > 2**53:
            raise f.fail(key, f"an integer of {len(str(abs(value)))} digits is out of range")
        if not math.isfinite(value):
            raise f.fail(key, f"{value} is not a finite number (no figure of a report is infinite)")
        if key.startswith("tau"):
            if not -1.0 <= value <= 1.0 and not key.endswith("_pools"):
                raise f.fail(key, f"{value} is not a rank correlation (-1..1)")
        elif value < 0:
            raise f.fail(key, f"{value} is negative: slowdowns, ranks, rates and counts are at least 0")
    return f.obj


def read_report(path: Path | str) -> dict[str, Any]:
    """A report written by `emmy eval prior --json`, checked; SourceError naming the file and field otherwise."""
    from emmy_core.fileio.sourcefile import load_json_file

    return check_report(load_json_file(path, MAX_REPORT_BYTES), str(path))


def check_report(doc: object, name: str, record: str = "$") -> dict[str, Any]:
    """A report's JSON (`EvalReport.to_json`) checked strictly; SourceError naming `name`, the record and field."""
    top = Fields(name, record, doc, "an evaluation report")
    if top.obj.get("format") != REPORT_FORMAT:
        found = f"{str(top.obj['format'])[:40]!r} is not {REPORT_FORMAT}" if "format" in top.obj else "missing"
        raise top.fail("format", f"{found}: not an evaluation report (a fit's metrics.json compares by diff, or "
                                 "with emmy fit --compare)")
    version = top.obj.get("version")
    if version != REPORT_VERSION or isinstance(version, bool):
        raise top.fail("version", f"report version {str(version)[:20]}; this Emmy reads report version "
                                  f"{REPORT_VERSION} (evaluate again with this version)")
    top.only(TOP)
    if top.text("pools", 16) not in VIEWS:
        raise top.fail("pools", f"must be one of {', '.join(VIEWS)}")
    top.text("dataset_digest", 128)
    prior = top.sub("prior")
    prior.text("source", 4096)
    prior.mapping("provenance")
    _summary(name, f"{record}.mean", top.raw("mean"))
    for field in ("by_card", "by_family"):
        for key, value in top.mapping(field).items():
            _summary(name, json_path(f"{record}.{field}", str(key)[:80]), value)
    for i, pool in enumerate(top.array("per_pool")):
        r = Fields(name, json_path(f"{record}.per_pool", i), pool, "a pool")
        for field in ("card", "setting", "kernel", "kernel_id", "sizes"):
            r.text(field, 4096, allow_empty=True)
    return top.obj


def _doc(x: EvalReport | Mapping[str, Any] | Path | str) -> dict[str, Any]:
    if isinstance(x, EvalReport):
        return x.to_json()
    if isinstance(x, Mapping):
        return dict(x)
    return read_report(x)


def compare_reports(a: EvalReport | Mapping[str, Any] | Path | str, b: EvalReport | Mapping[str, Any] | Path | str,
                    a_name: str | None = None, b_name: str | None = None) -> str:
    """Two reports (objects, their JSON, or report files) side by side per card and setting, with the
    change from A to B; a warning when they are on different datasets."""
    names = [n if n is not None else (str(x) if isinstance(x, Path | str) else "A" if i == 0 else "B")
             for i, (x, n) in enumerate(((a, a_name), (b, b_name)))]
    return compare_text(_doc(a), _doc(b), names[0], names[1])

