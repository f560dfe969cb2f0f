"""The installed prior: fitted on the repository freeze, shipped inside the package, refitted in one step.

`refit_installed` imports every freeze file (`freezes/*.json`, tune files excluded) into a
temporary database, exports it, and fits with the seed the shipped artifact records (or the
one given), on INSTALL_POOLS; the new artifact replaces the shipped one atomically (written
beside it, loaded back, then renamed), and a refit of the same content changes no byte of it
(`emmy_core.prior.provenance`). The same function, pointed at a temporary output,
is how a test proves the shipped prior reproduces from the committed freeze.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from collections.abc import Callable
from pathlib import Path

from emmy_core.prior.artifact import installed_prior_path, load_prior
from emmy_core.prior.provenance import install_artifact
from emmy_core.prior.training import DEFAULT_POOLS

INSTALL_POOLS = DEFAULT_POOLS
DEFAULT_SEED = 0
Progress = Callable[[str], None]


def freeze_files(freeze_dir: Path | str) -> list[Path]:
    """The freeze files of a folder (one per card), without the tune files waiting beside them."""
    return sorted(p for p in Path(freeze_dir).glob("*.json") if ".tune-" not in p.name)


def recorded_seed(path: Path | None = None) -> int:
    """The seed the shipped artifact was fitted with (read raw, so a stale artifact still tells it)."""
    p = path or installed_prior_path()
    try:
        seed = json.loads(p.read_text(encoding="utf-8"))["provenance"]["seed"]
    except (OSError, ValueError, KeyError, TypeError):
        return DEFAULT_SEED
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else DEFAULT_SEED


def refit_installed(freeze_dir: Path | str, out: Path | str | None = None, *, seed: int | None = None,
                    tracking_uri: str | None = "off", fits_dir: Path | str | None = None,
                    progress: Progress | None = None) -> object:
    """Refits the installed prior from the freeze into `out` (default: the shipped artifact); a FitResult."""
    from emmy_core.prior.dataset import read_dataset
    from emmy_core.prior.fit import FITS_DIR, fit_dataset
    from emmy_core.store.export import export_db
    from emmy_core.store.importer import import_db

    files = freeze_files(freeze_dir)
    if not files:
        raise FileNotFoundError(f"{freeze_dir}: no freeze files (*.json) to fit the installed prior on")
    with tempfile.TemporaryDirectory(prefix="emmy-install-") as tmp:
        db, ds = Path(tmp) / "freeze.db", Path(tmp) / "dataset"
        refused = [o.message for o in import_db(db, files, fresh=True) if not o.ok]
        if refused:
            raise ValueError(f"the freeze does not import: {refused[0]}")
        export_db(db, ds)
        dataset = read_dataset(ds, None, progress)
        result = fit_dataset(dataset, Path(tmp) / "prior.json", pools=INSTALL_POOLS, folds=5,
                             seed=recorded_seed() if seed is None else seed, tracking_uri=tracking_uri,
                             progress=progress, fits_dir=Path(fits_dir) if fits_dir is not None else FITS_DIR)
        target = Path(out) if out is not None else installed_prior_path()
        install_artifact(load_prior(result.artifact_path).doc, target)
    return dataclasses.replace(result, artifact_path=target)
