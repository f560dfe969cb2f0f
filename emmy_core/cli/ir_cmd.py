"""`emmy ir`: read a loop program and print its canonical text, identity and structural facts."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Annotated

import typer

from emmy_core.cli.common import fail, read_source
from emmy_core.ir import IRError, Program, facts, kernel_id, parse, parse_sizes, render

app = typer.Typer(help="Loop programs: canonical text, identity, structural facts.", no_args_is_help=True)


def _load(path: str):  # type: ignore[no-untyped-def]
    data, source = read_source(path)
    try:
        return parse(data, source)
    except IRError as exc:
        fail(str(exc))


@app.command("show")
def show(
    path: Annotated[str, typer.Argument(help="loop-program file, or - for standard input")],
    sizes: Annotated[str, typer.Option("--sizes", help="dynamic axis sizes, e.g. B=8,S=128")] = "",
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Print the canonical text, the identity and the structural facts at the given sizes."""
    kernel = _load(path)
    try:
        given = parse_sizes(sizes)
        if not isinstance(kernel, Program) and given:
            raise IRError(f"{kernel.name} is an extern kernel: it has no dynamic axes to size "
                          f"({', '.join(sorted(given))} given)")
        f = facts(kernel, given) if isinstance(kernel, Program) else None
    except IRError as exc:
        fail(str(exc))
    if as_json:
        out = {"kernel_id": kernel_id(kernel), "text": render(kernel), "facts": asdict(f) if f else None}
        typer.echo(json.dumps(out, indent=2, sort_keys=True))
        return
    typer.echo(render(kernel), nl=False)
    typer.echo(f"# kernel_id {kernel_id(kernel)}")
    if f is not None:
        typer.echo(f"# sizes {','.join(f'{k}={v}' for k, v in sorted(f.sizes.items())) or '(static)'}")
        for key, value in asdict(f).items():
            if key != "sizes":
                typer.echo(f"# {key}: {value}")


@app.command("id")
def ident(path: Annotated[str, typer.Argument(help="loop-program file, or - for standard input")]) -> None:
    """Print the identity (kernel_id) only."""
    typer.echo(kernel_id(_load(path)))
