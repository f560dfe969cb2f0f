"""The chain's steps, one function each, with what each reads and writes on disk.

tune -> fold -> import -> export -> fit -> (evaluate and judge: `emmy_core.chain.evaluation`) -> install.
The assets, `emmy fit` and the installed prior's refit call these and nothing else. Every write
goes through the atomic writers (`fileio.safefile`): a step that fails leaves the files it would have
replaced as they were.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from emmy_core.chain.paths import ChainPaths

if TYPE_CHECKING:
    from emmy_core.compute import Scheduler
    from emmy_core.freezefolder.fold import FoldReport
    from emmy_core.freezefolder.freeze_names import FreezeFolder
    from emmy_core.prior.dataset import Dataset
    from emmy_core.prior.fit import FitResult
    from emmy_core.prior.training import Params

Progress = Callable[[str], None]


class ChainError(RuntimeError):
    """A step refused its input; the message names the file and why, and says nothing was replaced."""


@dataclass(frozen=True)
class Tuned:
    """A tune: the matrix's report (cases, rows, kernels not benched; a replay's: rows per setting) and where
    each setting's tune file went (its local path, or its key in a URL inbox)."""

    report: Any
    files: dict[str, str]
    replayed_from: str = ""

    def summary(self) -> dict[str, Any]:
        """What the tune did, for a person: where its files went, and its cases and outcome counts (a replay:
        the file it served and its rows)."""
        r = self.report
        if self.replayed_from:
            return {"tune files": self.files, "replayed from": self.replayed_from, "rows recorded": sum(r.rows.values())}
        return {"tune files": self.files, "cases": r.cases, "rows recorded": r.rows_recorded, "ok": r.count("ok"),
                "failed": r.count("failed"), "flagged (not recorded)": r.count("flagged")}

    def problem(self) -> str:
        """Why the tune failed though it ran ('' when every kernel was benched, or it was a replay)."""
        if self.replayed_from or not self.report.unit_errors:
            return ""
        unit, why = self.report.unit_errors[0]
        return (f"{len(self.report.unit_errors)} kernels not benched; first: {unit.program.name} at "
                f"{unit.sizes_text}: {why[:300]}")


def tune(paths: ChainPaths, card: str, *, models: Sequence[str] = (), shapes: Sequence[str] = (),
         settings: Sequence[str] = (), budget: int | None = None, seed: int = 0, timeout_s: float = 120.0,
         spread_limit: float = 0.5, max_busy: float = 0.5, replay_from: str = "",
         on_setting: Progress | None = None) -> Tuned:
    """Benches the serving matrix on `card`, which must be this machine's (BenchError naming both otherwise);
    with `replay_from` (a frozen file of `card`), serves its rows instead (`bench.replay_runner`: no hardware).

    Reads: the serving matrix (or `replay_from`). Writes: one tune file per setting,
    `<slug>.tune-<stamp>.json`, into `paths.inbox` (created), merged in after every kernel; for a URL inbox
    (`paths.inbox_url`) the finished files are then delivered there and removed locally. Never the freeze or
    the database. A replay's FileError (a file or the store refused) is raised as ChainError naming the file.
    """
    if replay_from:
        return _delivered(paths, _replay(paths, card, replay_from, settings))
    from emmy_core.bench.harness import BenchConfig
    from emmy_core.bench.matrix import tune_matrix
    from emmy_core.exchange.recorders import TuneFileRecorder

    paths.inbox.mkdir(parents=True, exist_ok=True)
    recorders: dict[str, TuneFileRecorder] = {}

    def recorder_for(setting: str) -> TuneFileRecorder:
        return recorders.setdefault(setting, TuneFileRecorder(paths.inbox))

    bench = BenchConfig(timeout_s=timeout_s, spread_limit=spread_limit, seed=seed, max_busy=max_busy)
    report = tune_matrix(card, recorder_for, models=models, shapes=shapes, settings=settings, budget=budget,
                         seed=seed, config=bench, on_setting=on_setting)
    return _delivered(paths, Tuned(report, {s: str(r.path) for s, r in recorders.items() if r.path is not None}))


def _replay(paths: ChainPaths, card: str, frozen: str, settings: Sequence[str]) -> Tuned:
    from emmy_core.bench.replay_runner import replay_tune
    from emmy_core.fileio.errors import FileError

    try:
        report = replay_tune(card, frozen, paths.inbox, settings)
    except FileError as exc:
        raise ChainError(str(exc)) from None
    return Tuned(report, {s: str(p) for s, p in report.files.items()}, replayed_from=frozen)


def _delivered(paths: ChainPaths, done: Tuned) -> Tuned:
    """`done` with its finished tune files moved into the URL inbox (`fileio.urlfolder.deliver`: each under a
    partial key, then renamed) and removed from the local outbox; unchanged for a local inbox."""
    if paths.inbox_url is None or not done.files:
        return done
    from emmy_core.fileio.urlfolder import deliver

    local = [Path(f) for f in done.files.values()]
    keys = deliver(local, paths.inbox_url)
    for f in local:
        f.unlink()
    return dataclasses.replace(done, files=dict(zip(done.files, keys, strict=True)))


@dataclass(frozen=True)
class Folder:
    """The freeze folder as an observer sees it: its files by kind, the tune files waiting (beside it and in
    the inbox) and the digest of its files' names and contents (its data version)."""

    files: FreezeFolder
    waiting: list[Path]
    digest: str
    inbox: Inbox


@dataclass(frozen=True)
class Inbox:
    """The tune files waiting in the inbox and the digest of their names and contents."""

    files: list[Path]
    digest: str


def look(paths: ChainPaths) -> Folder:
    """The freeze folder and the inbox observed. Reads: `paths.freezes` and `paths.inbox`. Writes nothing."""
    import hashlib

    from emmy_core.freezefolder.fold import folder_digest, inbox_tune_files, pending_tune_files
    from emmy_core.freezefolder.freeze_names import freeze_folder

    waiting = inbox_tune_files(paths.inbox_source)
    text = "\n".join(f"{p.name}:{_inbox_digest(paths, p)}" for p in waiting)
    return Folder(freeze_folder(paths.freezes), pending_tune_files(paths.freezes, paths.inbox_source),
                  folder_digest(paths.freezes), Inbox(waiting, hashlib.sha256(text.encode()).hexdigest()))


def _inbox_digest(paths: ChainPaths, file: Path) -> str:
    """sha256 of a waiting tune file's content (a URL inbox's key read through fsspec)."""
    import hashlib

    if paths.inbox_url is None:
        return hashlib.sha256(file.read_bytes()).hexdigest()
    from emmy_core.fileio.urlfolder import read_key

    return hashlib.sha256(read_key(paths.inbox_url, str(file))).hexdigest()


def fold(paths: ChainPaths, progress: Progress | None = None) -> FoldReport:
    """Folds the waiting tune files into the freeze.

    Reads: the tune files in the inbox (`paths.inbox_source`: the local folder, or the URL inbox) and beside
    the freeze (`<slug>.tune-<stamp>.json`).
    Writes: each card's `<slug>.json` in `paths.freezes`, canonical (byte-identical when nothing new
    came in); then removes the folded tune files. A bad file stops it with nothing changed.
    """
    from emmy_core.freezefolder.fold import fold_tune_files

    return fold_tune_files(paths.freezes, paths.inbox_source, progress)


@dataclass(frozen=True)
class Imported:
    """What an import read and the database's content digest (its data version)."""

    sources: list[str]
    digest: str


def import_freeze(paths: ChainPaths, progress: Progress | None = None, *, db: Path | None = None) -> Imported:
    """Imports the freeze into a fresh tuning database.

    Reads: the reviewed files of `paths.freezes` (`freezefolder.freeze_names`: freezes and golden records).
    Writes: `db` (default `paths.tune_db`), built beside and swapped in only when every file imported.
    ChainError naming the first refused file otherwise (the old database stays).
    """
    from emmy_core.exchange.importer import import_db
    from emmy_core.freezefolder.freeze_names import freeze_folder
    from emmy_core.store.digest import store_digest

    target = db if db is not None else paths.tune_db
    sources = freeze_folder(paths.freezes).reviewed
    if not sources:
        raise ChainError(f"{paths.freezes}: no freeze files (<card>.json) to import")
    outcomes = import_db(target, sources, fresh=True, progress=progress)
    refused = [o for o in outcomes if not o.ok]
    if refused:
        raise ChainError(f"{len(refused)} of {len(outcomes)} freeze files refused (nothing replaced): "
                         f"{refused[0].message[:500]}")
    return Imported([o.source for o in outcomes], store_digest(target))


def export(paths: ChainPaths, progress: Progress | None = None, *, db: Path | None = None,
           out: Path | None = None) -> dict[str, Any]:
    """Exports the tuning database to the dataset the fit and the evaluation read; returns the manifest.

    Reads: `db` (default `paths.tune_db`). Writes: `out` (default `paths.dataset`): one Parquet file per
    table, the candidate pools and a manifest with versions, row counts and a content digest, swapped in whole.
    """
    from emmy_core.exchange.export import export_db

    return export_db(db if db is not None else paths.tune_db, out if out is not None else paths.dataset, progress)


def fit(dataset: Path | str | Dataset, out: Path, *, pools: str, folds: int, seed: int, tracking_uri: str | None,
        fits_dir: Path, tags: Mapping[str, str] | None = None, cards_file: Path | None = None,
        progress: Progress | None = None, install: bool = False, scheduler: str | Scheduler | None = None,
        params: Params | None = None) -> FitResult:
    """Fits a prior on a dataset (an export folder or its URL, or one already read).

    Reads: the dataset. Writes: the artifact `out` (atomically; `install` lets it be the installed prior),
    `<fits_dir>/<time>-<digest>/metrics.json`, and one MLflow run (`tracking_uri` 'off': none), opened
    before the work and closed when the fit is logged (FAILED when the fit fails).
    `scheduler`: where the folds and seed members are trained (`emmy_core.compute`: inprocess, the default,
    local:N or tcp://HOST:PORT); on Dask each worker reads the export folder itself (so `dataset` must be
    a folder then), and the artifact is the same bit for bit. `params`: the ranker's (default `Params()`).
    """
    import json
    import os

    from emmy_core.compute import parse_scheduler
    from emmy_core.prior.tracking import end_run, log_fit, start_run

    where = parse_scheduler(scheduler)  # a bad setting is refused before a run is opened
    if where.kind != "inprocess" and not isinstance(dataset, str | Path):
        raise ChainError(f"a fit on the Dask scheduler {where} needs the dataset's export folder (each worker "
                         "reads it), not a dataset already read")
    uri = tracking_uri if tracking_uri is not None else os.environ.get("MLFLOW_TRACKING_URI")
    run_id = start_run(uri, dict(tags or {})) if uri != "off" else None
    try:
        result = _fit_on(where, dataset, out, pools=pools, folds=folds, seed=seed, fits_dir=fits_dir,
                         cards_file=cards_file, progress=progress, install=install, params=params)
    except BaseException:
        if run_id is not None:
            end_run(uri, run_id, failed=True)
        raise
    if run_id is None:
        return result
    doc = json.loads(result.artifact_path.read_text(encoding="utf-8"))
    log_fit(uri, doc, result.metrics, result.artifact_path, result.fit_dir / "metrics.json", dict(tags or {}),
            run_id=run_id)
    return dataclasses.replace(result, run_id=run_id)


def _fit_on(where: Scheduler, dataset: Path | str | Dataset, out: Path, *, pools: str, folds: int, seed: int,
            fits_dir: Path, cards_file: Path | None, progress: Progress | None, install: bool,
            params: Params | None) -> FitResult:
    """`fit_dataset` with its rankers trained where `where` says (in this process, or as Dask tasks that read
    the export folder `dataset` themselves, checked against the digest read here)."""
    from emmy_core.compute import task_map
    from emmy_core.prior.dataset import read_dataset
    from emmy_core.prior.fit import fit_dataset
    from emmy_core.prior.fold_tasks import DaskTrainer, DatasetRef

    data = read_dataset(dataset, cards_file, progress) if isinstance(dataset, str | Path) else dataset
    if where.kind == "inprocess":
        return fit_dataset(data, out, pools=pools, folds=folds, seed=seed, tracking_uri="off", progress=progress,
                           fits_dir=fits_dir, install=install, params=params)
    from emmy_core.fileio.urlfolder import shared_location

    assert isinstance(dataset, str | Path), "fit refuses a dataset already read for a Dask scheduler"
    ref = DatasetRef(shared_location(dataset), None if cards_file is None else str(Path(cards_file).resolve()), data.digest)
    if progress is not None:
        progress(f"training on the Dask scheduler {where}")
    with task_map(where) as run:
        return fit_dataset(data, out, pools=pools, folds=folds, seed=seed, tracking_uri="off", progress=progress,
                           fits_dir=fits_dir, install=install, params=params, trainer=DaskTrainer(ref, run))


def content_digest(artifact: Path) -> str:
    """A prior artifact's content digest (its data version: the same dataset and recipe fit the same prior)."""
    from emmy_core.prior import load_prior
    from emmy_core.prior.provenance import content_digest as digest_of

    return digest_of(load_prior(artifact).doc)


@dataclass(frozen=True)
class Installed:
    """An install: where, whether a byte changed, and the prior's content digest and provenance."""

    path: Path
    written: bool
    digest: str
    provenance: dict[str, Any]


def install(candidate: Path, target: Path) -> Installed:
    """Installs a candidate prior.

    Reads: `candidate` (checked to load). Writes: `target`, atomically and checked to load back; a
    candidate of the same content changes no byte of it (`written` False).
    """
    from emmy_core.prior import load_prior
    from emmy_core.prior.provenance import content_digest, install_artifact

    prior = load_prior(candidate)
    written = install_artifact(prior.doc, target)
    return Installed(Path(target), written, content_digest(prior.doc), dict(prior.info["provenance"]))


def refit_installed(freezes: Path | str, out: Path | str | None = None, *, seed: int | None = None,
                    tracking_uri: str | None = "off", fits_dir: Path | str | None = None,
                    progress: Progress | None = None) -> FitResult:
    """Refits the installed prior from a freeze folder: import, export, fit, install, in a temporary folder.

    Reads: the reviewed files of `freezes`. Writes: `out` (default the package's installed prior) through
    `install`, so a refit of the same content changes no byte; the fit's metrics under `fits_dir`.
    The seed is the one the installed artifact records unless given.
    """
    from emmy_core.prior.fit import FITS_DIR
    from emmy_core.prior.installed import recorded_seed
    from emmy_core.prior.training import DEFAULT_POOLS

    with tempfile.TemporaryDirectory(prefix="emmy-install-") as tmp:
        temp = ChainPaths(freezes=Path(freezes), data=Path(tmp), fits=Path(fits_dir) if fits_dir else FITS_DIR)
        import_freeze(temp)
        export(temp)
        result = fit(temp.dataset, Path(tmp) / "prior.json", pools=DEFAULT_POOLS, folds=5,
                     seed=recorded_seed() if seed is None else seed, tracking_uri=tracking_uri, fits_dir=temp.fits,
                     progress=progress)
        target = Path(out) if out is not None else ChainPaths().installed
        install(result.artifact_path, target)
    return dataclasses.replace(result, artifact_path=target)
