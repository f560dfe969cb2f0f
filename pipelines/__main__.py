"""`python -m pipelines` (what `make run` runs): the whole chain in this process, then what it found.

Materializes freeze -> tuning database -> dataset -> prior -> evaluation through Dagster with
the embedded defaults (DuckDB under `_data/`, MLflow at `_tune/mlflow.db`), on the Dagster
instance at `$DAGSTER_HOME` when set, else that of `dagster.yaml` when run from the repository
root (so `dagster dev` shows the run afterwards), then prints the main job's report: the evaluation table, the model's forks with
the evidence answering each, and the three ways to look further.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import dagster as dg
import typer

from emmy_core.cli.main_job import DEFAULT_MODEL, DEFAULT_SHAPE, report
from emmy_core.cli.options import Opt, SettingOpt, ShapeOpt, shape_of
from pipelines.definitions import chain_assets, defs
from pipelines.jobs import CHAIN, run_chain

LOCK_FILE = "chain.lock"  # in the data folder: one chain at a time per workspace
SUMMARY = {  # what to say of each asset: its metadata keys worth a line
    "freeze_files": ("freeze files", "tune files waiting"),
    "refreshed_freeze": ("freeze files", "tune files folded", "rows read"),
    "tuning_db": ("measurements", "goldens"),
    "dataset": ("pools", "digest"),
    "prior": ("cv top1", "cv tau", "mlflow_run_id"),
    "evaluation": ("verdict", "mlflow_run_id"),
}


class InstanceError(Exception):
    """DAGSTER_HOME names no folder: the run would have nowhere its history is kept."""


@contextmanager
def repository_instance(root: Path, home: str = "") -> Iterator[dg.DagsterInstance]:
    """The instance at `home` (DAGSTER_HOME, as the `dagster` CLI reads it) when given, else the one `dagster.yaml`
    at `root` configures (storage under .dagster/), else a throwaway one."""
    if home:
        if not Path(home).is_dir():
            raise InstanceError(f"DAGSTER_HOME={home!r} is not a folder (make it, or unset DAGSTER_HOME to use "
                                f"this repository's dagster.yaml)")
        with dg.DagsterInstance.from_config(home) as instance:
            yield instance
    elif (root / "dagster.yaml").is_file():
        with dg.DagsterInstance.from_config(str(root)) as instance:
            yield instance
    else:
        with dg.DagsterInstance.ephemeral() as instance:
            yield instance


def _value(v: object) -> object:
    value = getattr(v, "value", getattr(v, "text", getattr(v, "data", v)))
    return f"{value:.4g}" if isinstance(value, float) else value


def summarize(result: dg.ExecuteInProcessResult) -> None:
    """One line per asset observed, materialized or checked, with the figures worth reading."""
    for e in result.all_events:
        kind = e.event_type_value
        if kind in ("ASSET_MATERIALIZATION", "ASSET_OBSERVATION") and e.asset_key is not None:
            data = e.event_specific_data
            record = getattr(data, "materialization", None) or getattr(data, "asset_observation", None)
            name = e.asset_key.to_user_string()
            meta = record.metadata if record is not None else {}
            shown = "; ".join(f"{k} {_value(meta[k])}" for k in SUMMARY.get(name, ()) if k in meta)
            print(f"  {name:<17} {'observed' if kind == 'ASSET_OBSERVATION' else 'materialized'}: {shown}",
                  flush=True)
        elif kind == "ASSET_CHECK_EVALUATION":
            data = e.event_specific_data
            print(f"  check {data.check_name:<22} {'passed' if data.passed else 'FAILED'}: "  # type: ignore[union-attr]
                  f"{data.description or ''}", flush=True)  # type: ignore[union-attr]
        elif kind == "STEP_FAILURE":
            error = e.event_specific_data.error  # type: ignore[union-attr]
            print(f"  step {e.step_key} FAILED: {innermost(error)[:600]}", flush=True)


def innermost(error: object) -> str:
    """The message of the error that caused a step's failure (Dagster wraps the user's error in its own
    'Error occurred while executing op' message: the cause is what a person needs to read)."""
    while getattr(error, "cause", None) is not None:
        error = error.cause  # type: ignore[attr-defined]
    message = str(getattr(error, "message", "") or "").strip()
    return message.splitlines()[-1] if message else "(no message)"


def failure_cause(result: dg.ExecuteInProcessResult) -> str:
    """The first failed step and its cause, in one line ('' when no step failed)."""
    for e in result.all_events:
        if e.event_type_value == "STEP_FAILURE":
            return f"step {e.step_key}: {innermost(e.event_specific_data.error)}"  # type: ignore[union-attr]
    return ""


def main(
    model: Annotated[str, Opt("--model", help="reference model whose forks are shown")] = DEFAULT_MODEL,
    shape: ShapeOpt = DEFAULT_SHAPE,
    setting: SettingOpt = "deploy",
    wait: Annotated[float, Opt("--wait", min=0.0, max=24 * 3600.0, metavar="SECONDS", help="when another chain "
                               "runs in this workspace, wait this long for it (default: refuse)")] = 0.0,
) -> None:
    """Materialize the whole chain in this process, then print what it found (exit 1 when a step failed,
    3 when another chain holds the workspace)."""
    dims = shape_of(shape)
    from emmy_core.chain.chainstatus import write_status
    from emmy_core.chain.deadruns import release_dead_runs
    from emmy_core.chain.runlock import RunLockedError, run_lock

    root = Path.cwd()
    data = Path(defs.resources["paths"].data_dir)  # type: ignore[union-attr]
    try:
        with run_lock(data / LOCK_FILE, wait_s=wait, say=lambda m: print(m, flush=True)):
            started = time.monotonic()
            print(f"== the chain, in this process: {' -> '.join(CHAIN)}", flush=True)
            with repository_instance(root, os.environ.get("DAGSTER_HOME", "")) as instance:
                release_dead_runs(instance, say=lambda m: print(m, flush=True))  # a killed chain's pool slot
                result = run_chain(chain_assets(), dict(defs.resources), instance)
            summarize(result)
            cause = "" if result.success else failure_cause(result) or "a step failed"
            write_status(data, result.run_id, result.success, cause)
            print(f"  {'done' if result.success else 'STOPPED: ' + cause} in {time.monotonic() - started:.0f} s "
                  f"(Dagster run {result.run_id})\n", flush=True)
            report(model, dims, data, setting)
    except RunLockedError as exc:
        print(f"python -m pipelines: {exc}", file=sys.stderr, flush=True)
        raise typer.Exit(3) from None
    except InstanceError as exc:
        print(f"python -m pipelines: {exc}", file=sys.stderr, flush=True)
        raise typer.Exit(2) from None
    if not result.success:
        raise typer.Exit(1)


if __name__ == "__main__":
    typer.run(main)
