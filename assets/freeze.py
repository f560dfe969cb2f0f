"""The repository freeze: the files in `freezes/` (observed) and the nightly fold of tune files into them."""

import dagster as dg

from assets import GROUP
from assets.resources import EmmyPaths
from assets.tune import tune_files


@dg.observable_source_asset(group_name=GROUP, description=(
    "The repository freeze: one canonical JSON file per card in `freezes/` (golden records and tune files waiting "
    "beside them). Its data version is the digest of the files' names and contents."))
def freeze_files(paths: EmmyPaths) -> dg.ObserveResult:
    from emmy_core.chain import steps

    folder = steps.look(paths.chain())
    return dg.ObserveResult(data_version=dg.DataVersion(folder.digest), metadata={
        "freeze files": dg.MetadataValue.json([p.name for p in folder.files.reviewed]),
        "tune files waiting": len(folder.waiting), "folder": dg.MetadataValue.path(str(paths.freeze_dir))})


@dg.asset(deps=[freeze_files, tune_files], group_name=GROUP, pool="freezes", description=(
    "The freeze after the nightly fold (`chain.steps.fold`): the tune files in the inbox (`_tune/files/`) and "
    "beside the freeze folded into one canonical file per card, then removed. Byte-identical when nothing came in."))
def refreshed_freeze(context: dg.AssetExecutionContext, paths: EmmyPaths) -> dg.MaterializeResult:
    from emmy_core.chain import steps

    chain = paths.chain()
    report = steps.fold(chain, progress=lambda name: context.log.info(f"folding {name}"))
    digest = steps.look(chain).digest
    return dg.MaterializeResult(data_version=dg.DataVersion(digest), metadata={
        "freeze files": dg.MetadataValue.json([p.name for p in report.refresh.freezes]),
        "tune files folded": dg.MetadataValue.json([p.name for p in report.refresh.folded]),
        "rows read": report.refresh.rows, "digest": digest})
