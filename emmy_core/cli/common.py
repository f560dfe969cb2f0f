"""Shared pieces of the CLI: reading a file or stdin, printing errors the same way everywhere."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

import typer

MAX_INPUT_BYTES = 64 * 1024 * 1024
"""Largest file (or standard input) a command reads as one program or model source."""


def read_source(path: str) -> tuple[bytes, str]:
    """Bytes of FILE, or of standard input for `-`, with the name to report errors against."""
    if path == "-":
        data = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
        if len(data) > MAX_INPUT_BYTES:
            fail(f"<stdin>: over the cap of {MAX_INPUT_BYTES} bytes")
        return data, "<stdin>"
    from emmy_core.fileio.inputfile import InputFileError, read_input

    try:
        return read_input(Path(path), MAX_INPUT_BYTES, "source file"), path
    except InputFileError as exc:
        fail(str(exc))


def fail(message: str, code: int = 2) -> NoReturn:
    typer.echo(f"emmy: error: {message}", err=True)
    raise typer.Exit(code)
