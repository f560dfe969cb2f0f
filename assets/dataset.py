"""The dataset: the tuning database exported to Parquet (what the fit and the evaluation read), and its check."""

import dagster as dg

from assets import GROUP
from assets.resources import DuckDBStore, EmmyPaths
from assets.tuning_db import check_result, tuning_db


@dg.asset(deps=[tuning_db], group_name=GROUP, pool="duckdb", description=(
    "The dataset export (`_data/dataset/`, `chain.steps.export`): one Parquet file per table, the candidate pools "
    "the fit needs, and a manifest with versions, row counts and a content digest (its data version)."))
def dataset(context: dg.AssetExecutionContext, paths: EmmyPaths, store: DuckDBStore) -> dg.MaterializeResult:
    from emmy_core.chain import steps

    chain = paths.chain()
    manifest = steps.export(chain, lambda t: context.log.info(f"exporting {t}"), db=store.file(paths))
    pools = manifest["tables"]["pools"]["candidates"]
    return dg.MaterializeResult(data_version=dg.DataVersion(manifest["digest"]), metadata={
        "path": dg.MetadataValue.path(str(chain.dataset)), "digest": manifest["digest"],
        "rows": dg.MetadataValue.json({n: t["rows"] for n, t in manifest["tables"].items()}),
        "pools": pools["pools"], "pools with enumerated candidates": pools["enumerated"],
        "pools on undescribed cards": pools["unknown_card"]})


@dg.asset_check(asset=dataset, blocking=True, description=(
    "`emmy db check` on the export: the manifest's versions and digests verify, and the exported tables "
    "agree with themselves. Blocking: on a failure the prior is not fitted."))
def dataset_consistent(paths: EmmyPaths) -> dg.AssetCheckResult:
    from emmy_core.exchange.check_export import check_export
    from emmy_core.fileio.errors import FileError

    try:
        report = check_export(paths.chain().dataset)
    except FileError as exc:  # the manifest or a file does not verify: that is the finding
        return dg.AssetCheckResult(passed=False, description=str(exc)[:1000])
    return check_result(report)
