"""Every on-disk path of the chain, in one value: the freeze folder, the inbox (a local folder, or an fsspec
URL), the tuning database, the dataset, the fits, the evaluation folder, the installed prior and the MLflow store.

Relative paths are taken from the folder the process runs in (the repository root under
`make run` and `dagster dev`). The defaults are written here once; the Dagster resources, the CLI
and the tests build a `ChainPaths` rather than joining paths themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from emmy_core.prior.tracking import DEFAULT_URI, resolve_uri

FREEZES = Path("freezes")
INBOX = Path("_tune/files")
DATA = Path("_data")
FITS = Path("_tune/fits")
MLFLOW_DB = Path(DEFAULT_URI.removeprefix("sqlite:///"))
"""The local MLflow store when no tracking URI is given (`sqlite:///_tune/mlflow.db`)."""


def inbox_at(tune_inbox: str, data: Path) -> tuple[Path, str | None]:
    """The configured inbox as (the local folder a tune writes into, the URL inbox or None): an fsspec URL
    (memory://, s3://) is the inbox the fold reads, and a tune writes into `<data>/outbox` and delivers there;
    a path or file:// URL is the local inbox itself."""
    from emmy_core.fileio.urlfolder import is_url, local_path

    if is_url(tune_inbox):
        return data / "outbox", tune_inbox
    return local_path(tune_inbox), None


@dataclass(frozen=True)
class ChainPaths:
    """Where the chain reads and writes. `installed_prior` None: the prior installed in the package;
    `tracking_uri` empty: `$MLFLOW_TRACKING_URI` when set at run time, else the local SQLite store."""

    freezes: Path = FREEZES
    inbox: Path = INBOX
    data: Path = DATA
    fits: Path = FITS
    installed_prior: Path | None = None
    tracking_uri: str = ""
    inbox_url: str | None = None
    """The inbox when it is an fsspec URL (memory://, s3://; `fileio.urlfolder`): a tune writes into the local
    `inbox` (an outbox then) and delivers its finished files there; the fold and the observers read it."""

    @property
    def inbox_source(self) -> Path | str:
        """Where the fold and the observers take tune files from: the URL inbox, else the local one."""
        return self.inbox_url or self.inbox

    @property
    def tune_db(self) -> Path:
        """The tuning database the freeze is imported into, fresh, every run."""
        return self.data / "tune.db"

    @property
    def dataset(self) -> Path:
        """The dataset export the fit and the evaluation read."""
        return self.data / "dataset"

    @property
    def evaluation(self) -> Path:
        """The evaluation folder: report.json, table.md and the plots (`emmy_core.chain.evaluation`)."""
        return self.data / "evaluation"

    @property
    def candidate(self) -> Path:
        """The prior a fit writes: a candidate until the evaluation's verdict lets it be installed."""
        return self.fits / "candidate.json"

    @property
    def installed(self) -> Path:
        """Where the installed prior lives (the package's unless configured)."""
        if self.installed_prior is not None:
            return self.installed_prior
        from emmy_core.prior.artifact import installed_prior_path

        return Path(installed_prior_path())

    def tracking(self) -> str:
        """The MLflow tracking URI the chain logs to (resolved at call time, never at import)."""
        return resolve_uri(self.tracking_uri or None)
