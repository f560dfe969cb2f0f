"""`emmy main`: the main job `make run` starts; for now it shows the day-one kernels and their identities."""

from __future__ import annotations

import typer


def main_job() -> None:
    """Run the main job on the embedded defaults."""
    from emmy_core.ir import kernel_id, render
    from emmy_core.ir.builders import day_one_kernels

    for label, program in day_one_kernels():
        typer.echo(f"{kernel_id(program)[:16]}  {label}")
    typer.echo("")
    label, program = day_one_kernels()[0]
    typer.echo(f"# {label}")
    typer.echo(render(program), nl=False)
