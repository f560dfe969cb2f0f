"""The tuning database the chain reads: the freeze imported fresh into one DuckDB file, and its check."""

import dagster as dg

from assets import GROUP
from assets.freeze import refreshed_freeze
from assets.resources import DuckDBStore, EmmyPaths
from emmy_core.store.check import CheckReport


@dg.asset(deps=[refreshed_freeze], group_name=GROUP, pool="duckdb", description=(
    "The freeze imported into a fresh DuckDB file (`tune.db` in the data folder, `chain.steps.import_freeze`): the snapshot the "
    "dataset is exported from. A file the importer refuses fails it. Its data version is the content digest."))
def tuning_db(context: dg.AssetExecutionContext, paths: EmmyPaths, store: DuckDBStore) -> dg.MaterializeResult:
    from emmy_core.chain import steps
    from emmy_core.store.stats import cards_markdown, db_stats

    try:
        done = steps.import_freeze(paths.chain(), lambda s: context.log.info(f"importing {s}"), db=store.file(paths))
    except steps.ChainError as exc:
        raise dg.Failure(description=str(exc)) from None
    stats = db_stats(store.file(paths))
    return dg.MaterializeResult(data_version=dg.DataVersion(done.digest), metadata={
        "path": dg.MetadataValue.path(str(store.file(paths))), "digest": done.digest,
        "sources": dg.MetadataValue.json(done.sources), "rows": dg.MetadataValue.json(stats["tables"]),
        "measurements": stats["tables"].get("measurements", 0), "goldens": stats["goldens"]["total"],
        "cards": dg.MetadataValue.md(cards_markdown(stats))})


@dg.asset_check(asset=tuning_db, blocking=True, pool="duckdb", description=(
    "`emmy db check` on the tuning database: every digest, reference, card, knob and version agrees. "
    "Blocking: on a failure nothing downstream materializes."))
def tuning_db_consistent(paths: EmmyPaths, store: DuckDBStore) -> dg.AssetCheckResult:
    from emmy_core.fileio.errors import FileError
    from emmy_core.store.check import check_db

    try:
        report = check_db(store.file(paths))
    except FileError as exc:  # no store, or not one: that is the finding
        return dg.AssetCheckResult(passed=False, description=str(exc)[:1000])
    return check_result(report)


def check_result(report: CheckReport) -> dg.AssetCheckResult:
    """An `emmy db check` report as a check result: pass when nothing failed; counts and examples shown."""
    failing = {k: n for k, n in report.counts.items() if n}
    return dg.AssetCheckResult(
        passed=report.ok,
        description="consistent" if report.ok else
        f"{sum(failing.values())} problems: " + "; ".join(f"{k} {n}" for k, n in failing.items()),
        metadata={"counts": dg.MetadataValue.json(report.counts),
                  "examples": dg.MetadataValue.json({k: v for k, v in report.examples.items() if v})})
