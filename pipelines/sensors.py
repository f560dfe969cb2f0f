"""The sensor: new tune files (in the inbox or beside the freeze) start the nightly refresh at once.

Its cursor is the sorted list of the tune-file names it saw waiting last time, persisted by
Dagster between evaluations: a name not in it asks for one run (keyed by the new names, so a
repeated evaluation never asks twice); nothing new asks for nothing.
"""

import hashlib
import json

import dagster as dg

from assets.resources import EmmyPaths
from pipelines.jobs import nightly_refresh


def read_cursor(cursor: str | None) -> set[str]:
    """The names a cursor holds (an unreadable cursor holds none: every waiting file is then new)."""
    try:
        names = json.loads(cursor) if cursor else []
    except ValueError:
        return set()
    return {n for n in names if isinstance(n, str)} if isinstance(names, list) else set()


@dg.sensor(job=nightly_refresh, minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Starts the nightly refresh when a tune file that was not waiting before appears.")
def new_tune_files(context: dg.SensorEvaluationContext, paths: EmmyPaths) -> dg.SensorResult:
    from emmy_core.chain import steps

    waiting = sorted({p.name for p in steps.look(paths.chain()).waiting})
    new = [n for n in waiting if n not in read_cursor(context.cursor)]
    cursor = json.dumps(waiting)
    if not new:
        return dg.SensorResult(skip_reason="no new tune files", cursor=cursor)
    key = hashlib.sha256("\n".join(new).encode()).hexdigest()[:16]
    return dg.SensorResult(run_requests=[dg.RunRequest(run_key=f"tune-files-{key}",
                                                       tags={"emmy/new_tune_files": str(len(new))})],
                           cursor=cursor)
