"""Which fields of a prior artifact are its content: what makes two fits the same prior.

A prior is its features, trees, calibration, metrics and the recipe and data it was fitted
on (the provenance's dataset digest, pools, folds, seed, parameters). Nothing in it is a
wall-clock time: when a fit ran is in its MLflow run and its fit folder's name, never in the
artifact, so the same freeze and recipe give the same bytes. The code revision is recorded
but is not content: a commit that leaves the trees as they were makes the same prior, so
re-installing it changes no byte (`install_artifact` keeps the installed file, with the
revision that first produced those trees).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from emmy_core.prior.artifact import artifact_text, write_artifact

NOT_CONTENT = ("code_revision", "time")
"""Provenance fields that annotate a fit without changing the prior (`time`: written by older fits)."""


def content_of(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The artifact without the provenance fields that are not content."""
    out = dict(doc)
    prov = out.get("provenance")
    if isinstance(prov, Mapping):
        out["provenance"] = {k: v for k, v in prov.items() if k not in NOT_CONTENT}
    return out


def content_digest(doc: Mapping[str, Any]) -> str:
    """sha256 of the artifact's content in canonical form: the prior's data version."""
    return hashlib.sha256(artifact_text(content_of(doc)).encode("utf-8")).hexdigest()


def _installed_doc(target: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(target.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def install_artifact(doc: Mapping[str, Any], target: Path | str) -> bool:
    """Installs `doc` at `target` (atomically, checked to load), unless the file there already holds the
    same content: then not a byte of it changes. Returns whether the file was written."""
    path = Path(target)
    installed = _installed_doc(path) if path.is_file() else None
    if installed is not None and content_of(installed) == content_of(doc):
        from emmy_core.prior.artifact import load_prior

        load_prior(path)  # the same content, and it still loads: nothing to do
        return False
    write_artifact(doc, path, install=True)  # the install step: the one writer allowed over the installed prior
    return True
