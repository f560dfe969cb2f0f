"""`emmy compile`: compile a model for a card; with `--run`, run it beside torch eager and torch.compile.

Thin: load the model (a reference model or `package.module:Class` with `--input` specs), call
`emmy_core.compile(..., torch_ops="refuse")` (one graph with named axes, so `--shape` and `--strict-evidence`
apply to the whole model), print the resolution summary; with `--run`, check the buffers and inputs fit
before creating anything, run, and print the largest error against torch and the interleaved
median times against eager and Inductor (`emmy_core.compiler.compare`), then run the model once
through `torch.compile(backend="emmy")` and print its coverage (`emmy_core.compile_reports`). The stage it is
at goes to stderr as tune's progress does (`emmy_core.bench.progress.StageProgress`): without it `--run` was
silent for the minute its cold builds and Inductor's compile take.
"""

from __future__ import annotations

import json
import sys
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer

from emmy_core.cli.common import fail
from emmy_core.cli.options import (
    CardOpt,
    DbOpt,
    DtypeOpt,
    FreezesOpt,
    InputOpt,
    JsonOpt,
    ModelOpt,
    NoPriorOpt,
    Opt,
    PriorOpt,
    SettingOpt,
    ShapeOpt,
    model_and_inputs,
    shape_of,
)

StrictOpt = Annotated[bool, Opt("--strict-evidence", help="fail when a fork falls past the measured tiers")]

SMALL = {"B": 1, "S": 1}  # the example the model is compiled from; its own sizes are never run


def backend_coverage(module: Any, inputs: Any, *, build: bool = True, **options: Any) -> Any:
    """The emmy backend's reports for `module` on `inputs` (built and checked, or resolved only); CLI errors."""
    from emmy_core.compiler.backend import run_backend

    try:
        return run_backend(module, inputs, build=build, **options)[1]
    except (ValueError, RuntimeError) as exc:
        fail(f"the emmy backend: {str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}")


def prior_arg(prior: Path | None, no_prior: bool) -> Any:
    if prior is not None and no_prior:
        fail("give --prior or --no-prior, not both")
    if prior is not None:  # a prior named explicitly must load: refused, it is an error, never a warning
        from emmy_core.prior import PriorError, load_prior

        try:
            return load_prior(prior)
        except PriorError as exc:
            fail(f"--prior: {exc}")
    return False if no_prior else prior


def compile_command(
    model: ModelOpt,
    shape: ShapeOpt = "B=8,S=128",
    card: CardOpt = "local",
    setting: SettingOpt = "deploy",
    dtype: DtypeOpt = "f16",
    inputs: InputOpt = None,
    db: DbOpt = None,
    freezes: FreezesOpt = None,
    prior: PriorOpt = None,
    no_prior: NoPriorOpt = False,
    strict_evidence: StrictOpt = False,
    run: Annotated[bool, Opt("--run", help="run it beside torch eager and torch.compile, and compare")] = False,
    repeats: Annotated[int, Opt("--repeats", min=1, help="timed rounds (interleaved; medians)")] = 20,
    inductor: Annotated[bool, Opt("--inductor/--no-inductor", help="also time torch.compile (Inductor)")] = True,
    as_json: JsonOpt = False,
    progress: Annotated[bool, Opt("--progress/--no-progress", help="show the stage it is at on stderr (capturing, "
                                  "settling forks, building kernels N/M, running): a line redrawn on a terminal, "
                                  "else a line per stage")] = True,
) -> None:
    """Compile a model on generated kernels; with --run, compare it with torch (error and time)."""
    from emmy_core.bench.progress import StageProgress
    from emmy_core.compiler import StrictEvidenceError, TooLarge
    from emmy_core.compiler import compile as emmy_compile
    from emmy_core.compiler.build import reporting_builds
    from emmy_core.compiler.compare import compare
    from emmy_core.compiler.coverage import render_reports
    from emmy_core.compiler.memory import check_fits
    from emmy_core.graph.errors import GraphError
    from emmy_core.targets import UnknownCard

    sizes = shape_of(shape)
    chosen_prior = prior_arg(prior, no_prior)  # an explicit --prior that is refused stops here, before any work
    module, inputs_fn = model_and_inputs(model, dtype, inputs)
    shown = StageProgress(f"compile {model} at {shape}", enabled=progress)
    with shown, reporting_builds(partial(shown.count, "building kernels")):
        shown.stage("capturing the model, settling its forks")
        try:
            compiled = emmy_compile(module, inputs_fn(SMALL), card=card, setting=setting, tuning_db=db,
                                    freezes=freezes, prior=chosen_prior, strict_evidence=strict_evidence,
                                    torch_ops="refuse").one_graph
            shown.stage(f"settling forks at {shape}")
            compiled.prepare(sizes) if compiled.builder is not None else compiled.resolve(sizes)
        except StrictEvidenceError as exc:
            typer.echo(str(exc), err=True)
            raise typer.Exit(1) from None
        except (UnknownCard, GraphError, ValueError, RuntimeError) as exc:
            fail(str(exc))
        out: dict[str, Any] = {"model": model, "shape": shape, "card": compiled.card.name, "setting": setting,
                               "tiers": compiled.record.tiers()}
        if run:
            if compiled.builder is None:
                fail(f"cannot run: {compiled.cannot_run}")
            try:
                layout = compiled.layout(sizes)
                check_fits(layout.nbytes + layout.input_nbytes, compiled.device,
                           f"{model} at {shape} with its inputs")
            except (TooLarge, GraphError, ValueError) as exc:
                fail(str(exc))
            x = inputs_fn(sizes)
            shown.stage(f"running beside {'eager, Inductor (compiling)' if inductor else 'eager'}: {repeats} rounds")
            result = compare(compiled, module, x, repeats=repeats, inductor=inductor)
            out.update({"max_error": result.max_error, "median_us": result.medians_us, "failed": result.failed,
                        "vs_eager": result.ratio("eager"), "vs_inductor": result.ratio("inductor"),
                        "load": list(result.load)})
            shown.stage("coverage through the emmy backend")
            reports = backend_coverage(module, x, card=card, setting=setting, tuning_db=db, freezes=freezes,
                                       prior=prior_arg(prior, no_prior))
            out["coverage"] = [r.to_json() for r in reports]
    if as_json:
        out["record"] = compiled.record.to_json()
        typer.echo(json.dumps(out, indent=2, sort_keys=True))
        return
    typer.echo(compiled.explain())
    if run:
        typer.echo(f"max |emmy - torch| = {out['max_error']:.3g}  (load {out['load'][0]:.2f})")
        for name, us in out["median_us"].items():
            typer.echo(f"  {name:<9} {us:12.1f} us")
        for name, why in out["failed"].items():
            typer.echo(f"  {name:<9} failed: {why}", err=True)
        for base in ("eager", "inductor"):
            r = out[f"vs_{base}"]
            if r is not None:
                typer.echo(f"  emmy is {r:.2f}x {base}")
        typer.echo(f"torch.compile(backend='emmy') at {shape}:")
        typer.echo(render_reports(reports))
    sys.stdout.flush()
