"""How the last chain run ended, kept beside what it wrote, so that a report never passes off an older
run's evaluation as this one's.

`python -m pipelines` writes `chain-status.json` into the data folder when a run ends: its Dagster
run id, whether it succeeded, when it finished, and the cause when it stopped (the innermost error,
e.g. "not valid JSON at line 111", not Dagster's wrapper). `emmy main` reads it (strictly: it is a
file like any other) and marks an evaluation written before a failed run as stale, with the cause.
"""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass
from pathlib import Path

from emmy_core.fileio.safefile import atomic_write_text
from emmy_core.fileio.sourcefile import Fields, SourceError, load_json_file

STATUS_FILE = "chain-status.json"
STATUS_FORMAT = "emmy-chain-status"
STATUS_VERSION = 1


@dataclass(frozen=True)
class ChainStatus:
    """The end of one chain run."""

    run_id: str
    success: bool
    finished: str  # ISO time, UTC
    cause: str  # empty when it succeeded

    def finished_at(self) -> float:
        """`finished` as a POSIX timestamp (0 when it does not parse)."""
        try:
            return _dt.datetime.fromisoformat(self.finished.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return 0.0


def write_status(folder: Path | str, run_id: str, success: bool, cause: str = "") -> ChainStatus:
    """Records how a run ended (written atomically; only a status record is replaced)."""
    from emmy_core.fileio.filekind import check_output

    now = _dt.datetime.now(_dt.UTC).isoformat().replace("+00:00", "Z")
    status = ChainStatus(run_id[:100], success, now, cause[:2000])
    path = Path(folder) / STATUS_FILE
    check_output(path, STATUS_FORMAT, "the chain's status record")
    atomic_write_text(path, json.dumps({"format": STATUS_FORMAT, "version": STATUS_VERSION, "run_id": status.run_id,
                                        "success": success, "finished": now, "cause": status.cause},
                                       sort_keys=True, indent=1) + "\n")
    return status


def read_status(folder: Path | str) -> ChainStatus | None:
    """The last run's status in `folder`, None when there is none; SourceError when the file is malformed."""
    path = Path(folder) / STATUS_FILE
    if not path.exists() and not path.is_symlink():
        return None
    f = Fields(str(path), "$", load_json_file(path, 1024 * 1024), "a chain status record")
    if f.raw("format") != STATUS_FORMAT:
        raise f.fail("format", f"is not {STATUS_FORMAT}")
    f.integer("version", STATUS_VERSION, STATUS_VERSION)
    success = f.raw("success")
    if not isinstance(success, bool):
        raise f.fail("success", "must be true or false")
    return ChainStatus(str(f.text("run_id", 100)), success, str(f.text("finished", 40)),
                       str(f.text("cause", 2000, allow_empty=True)))


__all__ = ["STATUS_FILE", "ChainStatus", "SourceError", "read_status", "write_status"]
