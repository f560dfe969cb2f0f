"""The identifier rule: what a name in a loop program may be.

A name matches `^[A-Za-z_][A-Za-z0-9_]{0,63}$`, does not start with a double
underscore, and is not a C or Python keyword, a Python builtin, or a word of the
IR's own grammar or operator sets. Generated source additionally prefixes every
IR name, so a valid name can never collide with the code around it.
"""

from __future__ import annotations

import builtins
import keyword
import re

from emmy_core.ir.vocab import BINARY_OPS, DTYPES, GRAMMAR_WORDS, REDUCE_OPS, UNARY_OPS

IDENT_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}\Z")

C_KEYWORDS = frozenset(
    """auto break case char const continue default do double else enum extern float for goto if
    inline int long register restrict return short signed sizeof static struct switch typedef union
    unsigned void volatile while _Bool _Complex _Imaginary _Alignas _Alignof _Atomic _Generic
    _Noreturn _Static_assert _Thread_local bool true false NULL""".split()
)
PY_RESERVED = frozenset(keyword.kwlist) | frozenset(keyword.softkwlist) | frozenset(dir(builtins))
RESERVED = (
    C_KEYWORDS | PY_RESERVED | GRAMMAR_WORDS | UNARY_OPS | BINARY_OPS | REDUCE_OPS | frozenset(DTYPES)
)


def name_problem(name: object) -> str | None:
    """Why `name` is not a valid identifier, or None when it is."""
    if not isinstance(name, str):
        return f"a name must be a string, not {type(name).__name__}"
    if not IDENT_PATTERN.match(name):
        return f"{name[:80]!r} does not match {IDENT_PATTERN.pattern!r}"
    if name.startswith("__"):
        return f"{name!r} starts with a double underscore"
    if name in RESERVED:
        return f"{name!r} is a reserved word"
    return None
