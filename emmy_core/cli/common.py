"""Shared pieces of the CLI: reading a file or stdin, printing errors the same way everywhere."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

import typer


def read_source(path: str) -> tuple[bytes, str]:
    """Bytes of FILE, or of standard input for `-`, with the name to report errors against."""
    if path == "-":
        return sys.stdin.buffer.read(), "<stdin>"
    p = Path(path)
    try:
        return p.read_bytes(), str(p)
    except OSError as exc:
        fail(f"cannot read {path}: {exc.strerror or exc}")


def fail(message: str, code: int = 2) -> NoReturn:
    typer.echo(f"emmy: error: {message}", err=True)
    raise typer.Exit(code)


def shape_of(text: str) -> dict[str, int]:
    """`--shape` text as {B, S} sizes; a CLI error unless it gives exactly B and S."""
    from emmy_core.ir import IRError, parse_sizes

    try:
        sizes = parse_sizes(text)
    except IRError as exc:
        fail(f"--shape: {exc}")
    if set(sizes) != {"B", "S"}:
        fail(f"--shape must give exactly B and S (e.g. B=8,S=128), got {text!r}")
    return sizes
