"""The repository freeze: the files in `freezes/` (observed) and the nightly fold of tune files into them."""

import dagster as dg

from assets.tune import KEY as TUNE
from pipelines.resources import EmmyPaths

GROUP = "freeze"


@dg.observable_source_asset(group_name=GROUP, description=(
    "The repository freeze: one canonical JSON file per card in `freezes/` (and tune files waiting beside "
    "them). Its data version is the digest of the files' names and contents."))
def freeze_files(paths: EmmyPaths) -> dg.ObserveResult:
    from emmy_core.store.freeze_folder import folder_digest, pending_tune_files
    from emmy_core.store.refresh import freeze_dir_files

    freezes, _ = freeze_dir_files(paths.freezes) if paths.freezes.is_dir() else ([], [])
    return dg.ObserveResult(
        data_version=dg.DataVersion(folder_digest(paths.freezes)),
        metadata={"freeze files": dg.MetadataValue.json([p.name for p in freezes]),
                  "tune files waiting": len(pending_tune_files(paths.freezes, paths.inbox_source)),
                  "folder": dg.MetadataValue.path(str(paths.freezes))})


@dg.asset(deps=[freeze_files, TUNE], group_name=GROUP, pool="freezes", description=(
    "The freeze after the nightly fold: the tune files in the inbox (`_tune/files/`) and beside the freeze "
    "are folded into one canonical file per card, then removed. Byte-identical when nothing new came in."))
def refreshed_freeze(context: dg.AssetExecutionContext, paths: EmmyPaths) -> dg.MaterializeResult:
    from emmy_core.store.freeze_folder import fold_tune_files, folder_digest

    report = fold_tune_files(paths.freezes, paths.inbox_source, progress=lambda name: context.log.info(f"folding {name}"))
    return dg.MaterializeResult(
        data_version=dg.DataVersion(folder_digest(paths.freezes)),
        metadata={"freeze files": dg.MetadataValue.json([p.name for p in report.refresh.freezes]),
                  "tune files folded": dg.MetadataValue.json([p.name for p in report.refresh.folded]),
                  "rows read": report.refresh.rows,
                  "digest": folder_digest(paths.freezes)})
