"""The tuning database the chain reads: the freeze imported fresh into one DuckDB file, and its check."""

import dagster as dg

from assets.freeze import refreshed_freeze
from emmy_core.store.check import CheckReport, check_db
from emmy_core.store.errors import StoreError
from pipelines.resources import DuckDBStore, EmmyPaths

GROUP = "store"


@dg.asset(deps=[refreshed_freeze], group_name=GROUP, pool="duckdb", description=(
    "The freeze imported into a fresh DuckDB file (`_data/tune.db`) through the store's one writer: the "
    "snapshot the dataset is exported from. A source the importer refuses fails the materialization. Its "
    "data version is the store's content digest: an unchanged freeze gives the same one."))
def tuning_db(context: dg.AssetExecutionContext, paths: EmmyPaths, store: DuckDBStore) -> dg.MaterializeResult:
    from emmy_core.store.digest import store_digest
    from emmy_core.store.importer import import_db
    from emmy_core.store.refresh import freeze_dir_files
    from emmy_core.store.stats import db_stats

    sources = freeze_dir_files(paths.freezes)[0] if paths.freezes.is_dir() else []
    outcomes = import_db(store.file, sources, fresh=True, progress=lambda s: context.log.info(f"importing {s}"))
    refused = [o for o in outcomes if not o.ok]
    if refused:
        raise dg.Failure(description=f"{len(refused)} of {len(outcomes)} sources refused: {refused[0].message[:500]}",
                         metadata={"refused": dg.MetadataValue.json([o.source for o in refused])})
    stats = db_stats(store.file)
    digest = store_digest(store.file)
    return dg.MaterializeResult(data_version=dg.DataVersion(digest), metadata={
        "path": dg.MetadataValue.path(str(store.file)),
        "digest": digest,
        "sources": dg.MetadataValue.json([o.source for o in outcomes]),
        "rows": dg.MetadataValue.json(stats["tables"]),
        "measurements": stats["tables"].get("measurements", 0),
        "goldens": stats["goldens"]["total"],
        "cards": dg.MetadataValue.md(
            "| card | target | measurements | failed | kernels |\n|---|---|---:|---:|---:|\n"
            + "\n".join(f"| {c['card']} | {c['target']} | {c['measurements']} | {c['failed']} | {c['kernels']} |"
                        for c in stats["per_card"])),
    })


@dg.asset_check(asset=tuning_db, blocking=True, pool="duckdb", description=(
    "`emmy db check` on the tuning database: every digest, reference, card, knob and version agrees. "
    "Blocking: on a failure nothing downstream materializes."))
def tuning_db_consistent(store: DuckDBStore) -> dg.AssetCheckResult:
    try:
        report = check_db(store.file)
    except StoreError as exc:  # no store, or not one: that is the finding
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
