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
    from emmy_core.eval.tables import first_label, refused_lines
    from emmy_core.prior import PriorError, load_installed_prior, load_prior
    from emmy_core.prior.ranking import DIVERSE_KNOBS

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
    met = d["metrics"]
    cv = met.get("cv", {})
    shown = ", ".join(f"{k} {v:.3f}" for k, v in cv.items() if isinstance(v, int | float))
    typer.echo(f"  validated on the {met.get('split', 'kernel')} split over {met.get('folds')} folds: {shown}")
    kcv = met.get("kernel_cv", {})
    if kcv:
        shown = ", ".join(f"{k} {v:.3f}" for k, v in kcv.items() if isinstance(v, int | float))
        typer.echo(f"  kernel split over {met.get('kernel_folds')} folds: {shown}")
    rk = d["ranking"]

    def pct(v: object) -> str:
        return f"{float(v):+.1%}" if isinstance(v, int | float) else "-"

    top1 = rk.get("top1")
    typer.echo(f"  ranking of a card the fit never saw: {rk.get('mode')} ({rk.get('source')}, weight {rk.get('weight')}), won on the {rk.get('split', '?')} split"
               + (f" with top-1 {top1:.3f}" if isinstance(top1, int | float) else "")
               + (f" on {rk['judged_pools']} of {rk['held_pools']} held-out pools (the others lack the rule's"
                  " first option)" if rk.get("judged_pools") not in (None, rk.get("held_pools")) else "")
               + f": {pct(rk.get('vs_first'))} against {first_label(rk)}, {pct(rk.get('vs_ranker'))} against"
               f" the ranker alone, {pct(rk.get('vs_transfer_order'))} against the transfer order,"
               f" {pct(rk.get('vs_transfer_baseline'))} against the transfer baseline")
    reach = rk.get("lookup_reach_top1")
    if isinstance(reach, int | float):
        typer.echo(f"  the lookup's reach there (the best of the other cards' own best on each pool, an oracle's pick): "
                   f"top-1 {reach:.3f}; below it, a pick no other card found best")
    runner = rk.get("runner_up")
    if isinstance(runner, dict):
        typer.echo(f"  runner-up: {runner.get('mode')} ({runner.get('source')}, weight {runner.get('weight')}), "
                   f"top-1 {runner.get('top1'):.3f}; the winner picks {pct(runner.get('margin'))} against it")
    for line in refused_lines(rk):
        typer.echo(line)
    bare = rk.get("no_evidence", "ranker")
    judged = [r for r in rk.get("no_evidence_candidates", []) if isinstance(r, dict) and r.get("top1") is not None]
    why = ("; ".join(f"{r.get('no_evidence')} top-1 {r['top1']:.3f}" for r in judged)
           + f" on {judged[0].get('pools')} held-out pools without evidence"
           + (f" ({judged[0]['card_pools']} of new cards, {judged[0]['kernel_pools']} of new kernels)"
              if "kernel_pools" in judged[0] else "")
           + "".join(f"; {r.get('no_evidence')} not taken: {r['why']}" for r in judged if r.get("why"))) if judged else (
        "no held-out pool lacked evidence: the rule's order is the default" if bare == "first"
        else "fitted before this was selected")
    by = "the rule's first option" if bare == "first" else "the ranker alone"
    typer.echo(f"  a pool no other card measured (no transfer evidence) is ranked by {by} ({why}); one no rule "
               "ordered (an imported cache's) by the ranker alone")
    head, spread = rk.get("diverse", 0), rk.get("diverse_top5")
    judged = (f"; top-5 on held-out cards {spread['spread']:.3f} spread, {spread['plain']:.3f} not"
              if isinstance(spread, dict) and all(isinstance(spread.get(k), float) for k in ("spread", "plain")) else "")
    typer.echo(f"  the top {head} places of the shipped order go to candidates that differ from every one above in at "
               f"least {DIVERSE_KNOBS} knob values (the top-1 unmoved{judged})" if head
               else "  the top of the shipped order is not spread over knob values ("
               + (f"its held-out top-5 was clearly worse spread, on enough pools{judged}" if judged else "fitted before that was done") + ")")
    typer.echo("  a card the fit measured (in the transfer table) is ranked by the model alone (the kernel split)")
    typer.echo(f"  transfer table: {d['transfer']['pools']} pools from {len(d['transfer']['cards'])} cards"
               + (f" ({', '.join(d['transfer']['cards'])})" if d['transfer']['cards'] else ""))
    typer.echo(f"  price curves: {', '.join(sorted(d['calibration'])) or 'none (uncalibrated)'}")
    typer.echo(f"  {len(d['features'])} features: {', '.join(d['features'])}")
