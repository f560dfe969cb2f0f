"""The elementwise expression language the `elementwise` builder reads (a closed grammar, no eval).

    expr := term (('+' | '-') term)*      term := unary (('*' | '/') unary)*
    unary := '-' unary | atom             atom := NUMBER | NAME | FN '(' expr [',' expr] ')' | '(' expr ')'

FN is one of EW_FUNCTIONS (max, min, pow, cat take two arguments); `lo(x)` and `hi(x)` are the
first and second half of x's last axis, `cat(a, b)` joins two halves (only the halves kernel of
`emmy_core.graph.kernels` reads them; the plain builders refuse them); NAME is an input buffer and
follows the IR's identifier rule. The result is a small tuple tree that `builders.lower_expr`
turns into IR expressions.
"""

from __future__ import annotations

import math
import re

from emmy_core.ir.errors import IRError
from emmy_core.ir.names import name_problem

EW_FUNCTIONS = ("relu", "gelu", "gelu_tanh", "silu", "sigmoid", "exp", "log", "sqrt", "rsqrt", "abs", "tanh",
                "erf", "recip", "neg", "max", "min", "pow", "lo", "hi", "cat")
_EW_BINARY_FN = frozenset({"max", "min", "pow", "cat"})
HALF_FUNCTIONS = frozenset({"lo", "hi", "cat"})  # the halves of the last axis and their join
_EW_TOKEN = re.compile(r"\s*(?:(?P<num>[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
                       r"|(?P<op>[-+*/(),]))")
_EW_OPS = {"+": "add", "-": "sub", "*": "mul", "/": "div"}
MAX_EW_TEXT = 512
EwTree = tuple  # ("in", name) | ("num", value) | (op, child, ...)


def parse_expr(text: str) -> EwTree:
    """Reads an elementwise expression strictly; refuses anything outside the grammar, naming the spot."""
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_EW_TEXT:
        raise IRError(f"elementwise expression must be non-empty text of at most {MAX_EW_TEXT} characters")
    toks: list[tuple[str, str, int]] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _EW_TOKEN.match(text, pos)
        if m is None:
            raise IRError(f"elementwise expression {text[:80]!r}: unexpected character at {pos}")
        kind = m.lastgroup or "op"
        toks.append((kind, m.group(kind), m.start(kind)))
        pos = m.end()
    toks.append(("end", "", len(text)))
    at = [0]

    def peek() -> tuple[str, str, int]:
        return toks[at[0]]

    def take(expected: str | None = None) -> tuple[str, str, int]:
        tok = toks[at[0]]
        if expected is not None and tok[1] != expected:
            raise IRError(f"elementwise expression {text[:80]!r}: expected {expected!r} at {tok[2]}")
        at[0] += 1
        return tok

    def expr(depth: int) -> EwTree:
        if depth > 32:
            raise IRError(f"elementwise expression {text[:80]!r} nests too deep")
        node = term(depth)
        while peek()[1] in ("+", "-") and peek()[0] == "op":
            node = (_EW_OPS[take()[1]], node, term(depth))
        return node

    def term(depth: int) -> EwTree:
        node = unary(depth)
        while peek()[1] in ("*", "/") and peek()[0] == "op":
            node = (_EW_OPS[take()[1]], node, unary(depth))
        return node

    def unary(depth: int) -> EwTree:
        if peek()[0] == "op" and peek()[1] == "-":
            take()
            return ("neg", unary(depth + 1))
        return atom(depth)

    def atom(depth: int) -> EwTree:
        kind, word, where = take()
        if kind == "num":
            value = float(word)
            if not math.isfinite(value):
                raise IRError(f"elementwise expression {text[:80]!r}: number at {where} is not finite")
            return ("num", value)
        if kind == "op" and word == "(":
            node = expr(depth + 1)
            take(")")
            return node
        if kind == "name":
            if peek()[1] == "(":
                if word not in EW_FUNCTIONS:
                    raise IRError(f"elementwise expression {text[:80]!r}: unknown function {word!r} at {where}")
                take("(")
                args = [expr(depth + 1)]
                if word in _EW_BINARY_FN:
                    take(",")
                    args.append(expr(depth + 1))
                take(")")
                return (word, *args)
            problem = name_problem(word)
            if problem is not None or word in EW_FUNCTIONS:
                raise IRError(f"elementwise expression {text[:80]!r}: input name {word!r}: {problem or 'a function'}")
            return ("in", word)
        raise IRError(f"elementwise expression {text[:80]!r}: unexpected {word or 'end'!r} at {where}")

    tree = expr(0)
    if peek()[0] != "end":
        raise IRError(f"elementwise expression {text[:80]!r}: unexpected {peek()[1]!r} at {peek()[2]}")
    return tree


def ew_tag(tree: EwTree) -> str:
    """Canonical prefix text of an expression, used in the kernel name."""
    if tree[0] == "in":
        return str(tree[1])
    if tree[0] == "num":
        return repr(tree[1])
    return "_".join([tree[0], *(ew_tag(t) for t in tree[1:])])


