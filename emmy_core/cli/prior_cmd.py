"""`emmy prior info`: what a prior artifact is: version, provenance, features, headline metrics."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from emmy_core.cli.common import fail

app = typer.Typer(help="The prior: the artifact that ranks candidates where nothing was measured.",
                  no_args_is_help=True)


@app.command("info")
def info(file: Annotated[Path | None, typer.Option("--file", help="an artifact (default: the installed prior)")] = None,
         as_json: Annotated[bool, typer.Option("--json", help="print the whole description as JSON")] = False,
         ) -> None:
    """Print a prior's feature version, provenance, feature list and its fit's headline metrics."""
    from emmy_core.prior import PriorError, load_installed_prior, load_prior

    try:
        prior = load_prior(file) if file is not None else load_installed_prior()
    except PriorError as exc:
        fail(str(exc))
    d = prior.info
    if as_json:
        typer.echo(json.dumps(d, indent=1, sort_keys=True))
        return
    prov = d["provenance"]
    typer.echo(f"prior {d['source']}")
    typer.echo(f"  feature version {d['feature_version']}; {d['trees']} trees of depth {d['depth']}")
    typer.echo(f"  fitted on dataset {str(prov.get('dataset_digest'))[:16]} "
               f"(pools {prov.get('pools')}, seed {prov.get('seed')}, code {str(prov.get('code_revision'))[:16]})")
    typer.echo(f"  parameters {json.dumps(prov.get('params'), sort_keys=True)}")
    cv = d["metrics"].get("cv", {})
    shown = ", ".join(f"{k} {v:.3f}" for k, v in cv.items() if isinstance(v, int | float))
    typer.echo(f"  cross-validated over {d['metrics'].get('folds')} folds: {shown}")
    typer.echo(f"  price curves: {', '.join(sorted(d['calibration'])) or 'none (uncalibrated)'}")
    typer.echo(f"  {len(d['features'])} features: {', '.join(d['features'])}")
