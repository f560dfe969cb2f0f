"""The installed prior: the candidate installed once the evaluation's check passed."""

import dagster as dg

from assets import GROUP
from assets.evaluation import evaluation
from assets.resources import EmmyPaths


@dg.asset(deps=[evaluation], group_name=GROUP, description=(
    "The installed prior (`chain.steps.install`): the candidate copied over it (checked to load, written "
    "atomically) once the evaluation's check passed; a candidate of the same content changes no byte of it."))
def installed_prior(context: dg.AssetExecutionContext, paths: EmmyPaths) -> dg.MaterializeResult:
    from emmy_core.chain import steps

    chain = paths.chain()
    done = steps.install(chain.candidate, chain.installed)
    context.log.info(f"installed prior {done.digest[:12]} at {done.path}: "
                     f"{'written' if done.written else 'already this prior, not a byte changed'}")
    return dg.MaterializeResult(data_version=dg.DataVersion(done.digest), metadata={
        "path": dg.MetadataValue.path(str(done.path)),
        "written": done.written,  # False: the installed prior already was this one, byte for byte
        "provenance": dg.MetadataValue.json(done.provenance)})
