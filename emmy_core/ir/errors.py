"""Errors of the IR layer: every one says where the fault is."""

from __future__ import annotations


class IRError(ValueError):
    """A loop program that breaks a rule of the IR (built in code, not parsed)."""


class ParseError(IRError):
    """Loop-program text that cannot be read; names the line and column at fault."""

    def __init__(self, message: str, line: int, column: int, source: str = "<text>") -> None:
        self.message = message
        self.line = line
        self.column = column
        self.source = source
        super().__init__(f"{source}:{line}:{column}: {message}")
