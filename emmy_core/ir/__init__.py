"""Loop programs: data types, canonical text, a strict parser, exact identity, structural facts."""

from emmy_core.ir.check import validate
from emmy_core.ir.errors import IRError, ParseError
from emmy_core.ir.facts import Facts, facts
from emmy_core.ir.identity import IDENTITY_VERSION, identity_text, kernel_id
from emmy_core.ir.nodes import (
    Affine,
    Axis,
    Binary,
    Buffer,
    Cast,
    Const,
    Expr,
    Extent,
    Extern,
    Kernel,
    Let,
    Load,
    Loop,
    Program,
    Range,
    Reduce,
    Ref,
    Stmt,
    Store,
    Unary,
)
from emmy_core.ir.printer import render
from emmy_core.ir.sizes import extents, format_sizes, parse_sizes, resolve_sizes
from emmy_core.ir.text import parse

__all__ = [
    "IDENTITY_VERSION", "Affine", "Axis", "Binary", "Buffer", "Cast", "Const", "Expr", "Extent", "Extern",
    "Facts", "IRError", "Kernel", "Let", "Load", "Loop", "ParseError", "Program", "Range", "Reduce", "Ref",
    "Stmt", "Store", "Unary", "extents", "facts", "format_sizes", "identity_text", "kernel_id", "parse",
    "parse_sizes", "render", "resolve_sizes", "validate",
]
