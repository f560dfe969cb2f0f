"""Strict parser of loop-program text (the printer, `render`, is in `printer.py`).

Grammar (whitespace and `#` comments between tokens are insignificant; the printer
writes one declaration or statement per line, indented by two spaces a level):

    kernel   := 'kernel' NAME '{' axis* buffer+ stmt+ '}'
    axis     := 'axis' NAME '=' ( INT | 'dyn' '(' INT ')' )        # dyn(hint): expected size
    buffer   := ('in' | 'out') NAME ':' DTYPE '[' NAME (',' NAME)* ']'
    stmt     := 'for' NAME 'in' NAME '{' stmt+ '}'
              | 'let' NAME ':' DTYPE '=' expr
              | 'reduce' NAME ':' DTYPE '=' REDOP '(' NAME 'in' NAME [ '[' affine ':' INT ']' ] ')' expr
              | NAME '[' index (',' index)* ']' '=' expr            # store
    affine   := term ('+' term)*          term := NAME [ '*' INT ] | INT
    index    := NAME | INT                # a loop variable, or a constant position of a static axis
    expr     := NAME '[' index (',' index)* ']'                     # load
              | NAME                                                # a let or reduce value
              | 'const' '(' DTYPE ',' NUMBER ')'  | 'cast' '(' DTYPE ',' expr ')'
              | 'extent' '(' NAME ')'  | UNOP '(' expr ')'  | BINOP '(' expr ',' expr ')'
    extern   := 'extern' NAME '{' 'problem' INT (',' INT)* 'space' HEX64 '}'

NAME follows `names.py`; DTYPE, UNOP, BINOP and REDOP come from `vocab.py`. NUMBER is a
decimal integer for integer types and a decimal float, `inf` or `-inf` for floating ones;
floats print as Python's shortest round-trip `repr`. The window `[start : length]` of a
reduction covers `start .. start+length-1` clipped to the axis. Every rule of `check.py`
is applied while reading, so an error names the line and column of the token at fault.

The parser is a single pass over a token list made by one anchored regular expression
(linear time, no backtracking), nests at most `MAX_EXPR_DEPTH` expressions and
`MAX_LOOP_DEPTH` loops, and refuses texts over `MAX_TEXT_BYTES` before reading them.
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

from emmy_core.ir.check import MAX_EXPR_DEPTH, Scope, check_dtype, check_extern
from emmy_core.ir.errors import IRError, ParseError
from emmy_core.ir.names import name_problem
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
from emmy_core.ir.vocab import BINARY_OPS, FLOAT_DTYPES, UNARY_OPS, float_misfit

MAX_TEXT_BYTES = 4 * 1024 * 1024
MAX_TOKEN_CHARS = 128

# ---- tokenizer ---------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"(?P<ws>[ \t\r\n]+)|(?P<comment>#[^\n]*)"
    r"|(?P<num>-?(?:[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|inf))"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<punct>[{}()\[\],:=*+])"
    r"|(?P<bad>.)",
    re.DOTALL,
)
_HEX = re.compile(r"[0-9a-f]{64}(?![A-Za-z0-9_])")


class Tok(NamedTuple):
    kind: str  # num | name | punct | eof
    text: str
    pos: int  # offset in the text; line and column are computed only when reporting


def position(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column of a character offset."""
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def tokenize(text: str, source: str = "<text>") -> list[Tok]:
    """Tokens of `text` (whitespace and comments dropped); one C-level scan, linear in the length."""
    toks: list[Tok] = []
    append = toks.append
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        if kind == "ws" or kind == "comment":
            continue
        start, end = m.span()
        if kind == "bad":
            line, col = position(text, start)
            raise ParseError(f"unexpected character {m.group()!r}", line, col, source)
        if end - start > MAX_TOKEN_CHARS:
            line, col = position(text, start)
            raise ParseError(f"token longer than {MAX_TOKEN_CHARS} characters", line, col, source)
        append(Tok(kind, m.group(), start))  # type: ignore[arg-type]
    toks.append(Tok("eof", "", len(text)))
    return toks


# ---- parser ------------------------------------------------------------------------------------


class _Parser:
    def __init__(self, text: str, source: str) -> None:
        self.text = text
        self.toks = tokenize(text, source)
        self.i = 0
        self.source = source
        self.scope = Scope()

    # -- token helpers
    @property
    def tok(self) -> Tok:
        return self.toks[self.i]

    def fail(self, message: str, tok: Tok | None = None) -> ParseError:
        t = tok or self.tok
        line, col = position(self.text, t.pos)
        return ParseError(message, line, col, self.source)

    def _describe(self, t: Tok) -> str:
        return "end of text" if t.kind == "eof" else repr(t.text)

    def next(self) -> Tok:
        t = self.tok
        if t.kind != "eof":
            self.i += 1
        return t

    def expect(self, text: str) -> Tok:
        t = self.tok
        if t.text != text or t.kind == "num":
            raise self.fail(f"expected {text!r}, found {self._describe(t)}")
        return self.next()

    def at(self, text: str) -> bool:
        return self.tok.text == text and self.tok.kind != "num"

    def name(self, what: str) -> tuple[str, Tok]:
        t = self.tok
        if t.kind != "name":
            raise self.fail(f"expected a {what} name, found {self._describe(t)}")
        problem = name_problem(t.text)
        if problem is not None:
            raise self.fail(f"{what} name: {problem}")
        return self.next().text, t

    def word(self) -> Tok:
        t = self.tok
        if t.kind != "name":
            raise self.fail(f"expected a word, found {self._describe(t)}")
        return self.next()

    def dtype(self) -> str:
        t = self.word()
        try:
            return check_dtype(t.text)
        except IRError as exc:
            raise self.fail(str(exc), t) from None

    def integer(self, what: str, minimum: int = 1) -> int:
        t = self.tok
        if t.kind != "num" or not t.text.lstrip("-").isdigit():
            raise self.fail(f"expected an integer {what}, found {self._describe(t)}")
        v = int(t.text)
        if v < minimum or v > 2**31 - 1:
            raise self.fail(f"{what} must be in {minimum}..{2**31 - 1}, got {t.text}")
        self.next()
        return v

    def guard(self, tok: Tok, fn, *args):  # type: ignore[no-untyped-def]
        try:
            return fn(*args)
        except IRError as exc:
            raise self.fail(str(exc), tok) from None

    # -- top level
    def kernel(self) -> Kernel:
        t = self.tok
        if t.text == "extern" and t.kind == "name":
            k = self.extern()
        elif t.text == "kernel" and t.kind == "name":
            k = self.program()
        else:
            raise self.fail(f"expected 'kernel' or 'extern', found {self._describe(t)}")
        if self.tok.kind != "eof":
            raise self.fail(f"unexpected {self._describe(self.tok)} after the end of the kernel")
        return k

    def extern(self) -> Extern:
        self.expect("extern")
        name, _ = self.name("extern kernel")
        self.expect("{")
        self.expect("problem")
        dims = [self.integer("problem dimension")]
        while self.at(","):
            self.next()
            dims.append(self.integer("problem dimension"))
        self.expect("space")
        t = self.tok
        m = _HEX.match(self.text, t.pos)
        if m is None:
            raise self.fail(f"expected a sha256 digest (64 lowercase hex digits), found {self._describe(t)}")
        while self.tok.kind != "eof" and self.tok.pos < m.end():  # the digest spans several tokens
            self.next()
        self.expect("}")
        k = Extern(name, tuple(dims), m.group())
        self.guard(t, check_extern, k)
        return k

    def program(self) -> Program:
        self.expect("kernel")
        name, _ = self.name("kernel")
        self.expect("{")
        axes: list[Axis] = []
        while self.at("axis"):
            self.next()
            aname, at = self.name("axis")
            self.expect("=")
            if self.at("dyn"):
                self.next()
                self.expect("(")
                ax = Axis(aname, None, self.integer("expected size"))
                self.expect(")")
            else:
                ax = Axis(aname, self.integer("extent"))
            self.guard(at, self.scope.declare_axis, ax)
            axes.append(ax)
        buffers: list[Buffer] = []
        while self.at("in") or self.at("out"):
            role = self.next().text
            bname, bt = self.name("buffer")
            self.expect(":")
            dt = self.dtype()
            shape = self.index_list("axis")
            buf = Buffer(bname, role, dt, tuple(shape))
            self.guard(bt, self.scope.declare_buffer, buf)
            buffers.append(buf)
        if not buffers:
            raise self.fail("expected a buffer declaration ('in' or 'out')")
        body = self.stmts()
        end = self.expect("}")
        self.guard(end, self.scope.finish)
        return Program(name, tuple(axes), tuple(buffers), tuple(body))

    def index_list(self, what: str) -> list[str]:
        self.expect("[")
        items = [self.name(what)[0]]
        while self.at(","):
            self.next()
            items.append(self.name(what)[0])
        self.expect("]")
        return items

    def access_index(self) -> list[str | int]:
        """The index of a load or store: loop variables, or constant positions (checked against the axis)."""
        self.expect("[")
        items: list[str | int] = []
        while True:
            if self.tok.kind == "num":
                items.append(self.integer("index position", minimum=0))
            else:
                items.append(self.name("index")[0])
            if not self.at(","):
                break
            self.next()
        self.expect("]")
        return items

    def stmts(self) -> list[Stmt]:
        out: list[Stmt] = []
        while not self.at("}"):
            if self.tok.kind == "eof":
                raise self.fail("expected '}' before the end of text")
            out.append(self.stmt())
        if not out:
            raise self.fail("expected a statement")
        return out

    def stmt(self) -> Stmt:
        t = self.tok
        if t.kind == "name" and t.text == "for":
            self.next()
            var, vt = self.name("loop variable")
            self.expect("in")
            axis, _ = self.name("axis")
            self.guard(vt, self.scope.push_loop, var, axis)
            self.expect("{")
            body = self.stmts()
            self.expect("}")
            self.scope.pop_loop()
            return Loop(var, axis, tuple(body))
        if t.kind == "name" and t.text == "let":
            self.next()
            name, nt = self.name("value")
            self.expect(":")
            dt = self.dtype()
            self.expect("=")
            value, vtype = self.expr(0)
            self.guard(nt, self.scope.check_let, name, dt, vtype)
            return Let(name, dt, value)
        if t.kind == "name" and t.text == "reduce":
            return self.reduce()
        if t.kind == "name":
            buf, _ = self.name("buffer")
            index = self.access_index()
            self.expect("=")
            value, vtype = self.expr(0)
            self.guard(t, self.scope.check_store, buf, tuple(index), vtype)
            return Store(buf, tuple(index), value)
        raise self.fail(f"expected a statement, found {self._describe(t)}")

    def reduce(self) -> Reduce:
        self.expect("reduce")
        name, nt = self.name("value")
        self.expect(":")
        dt = self.dtype()
        self.expect("=")
        opt = self.word()
        self.expect("(")
        var, _ = self.name("reduction variable")
        self.expect("in")
        axis, _ = self.name("axis")
        window: Range | None = None
        if self.at("["):
            wt = self.next()
            start = self.affine()
            self.guard(wt, self.scope.check_affine, start)
            self.expect(":")
            window = Range(start, self.integer("window length"))
            self.expect("]")
        self.expect(")")
        self.guard(opt, self.scope.begin_reduce, name, dt, opt.text, var, axis)
        body, btype = self.expr(0)
        self.guard(nt, self.scope.end_reduce, name, dt, btype)
        return Reduce(name, dt, opt.text, var, axis, body, window)

    def affine(self) -> Affine:
        terms: list[tuple[str, int]] = []
        offset = 0
        while True:
            if self.tok.kind == "num":
                if offset:
                    raise self.fail("a window start has at most one constant term")
                offset = self.integer("window offset", minimum=0)
            else:
                var, _ = self.name("window variable")
                coef = 1
                if self.at("*"):
                    self.next()
                    coef = self.integer("window coefficient")
                terms.append((var, coef))
            if not self.at("+"):
                break
            self.next()
        return Affine(tuple(terms), offset)

    def expr(self, depth: int) -> tuple[Expr, str]:
        if depth > MAX_EXPR_DEPTH:
            raise self.fail(f"expression nests deeper than {MAX_EXPR_DEPTH}")
        t = self.tok
        if t.kind != "name":
            raise self.fail(f"expected an expression, found {self._describe(t)}")
        word = t.text
        nxt = self.toks[self.i + 1]
        if word == "const":
            self.next()
            self.expect("(")
            dt = self.dtype()
            self.expect(",")
            c = self.constant(dt)
            self.expect(")")
            return c, dt
        if word == "cast":
            self.next()
            self.expect("(")
            dt = self.dtype()
            self.expect(",")
            x, _ = self.expr(depth + 1)
            self.expect(")")
            return Cast(dt, x), dt
        if word == "extent":
            self.next()
            self.expect("(")
            axis, at = self.name("axis")
            self.expect(")")
            return Extent(axis), self.guard(at, self.scope.type_extent, axis)
        if word in UNARY_OPS:
            self.next()
            self.expect("(")
            x, xt = self.expr(depth + 1)
            self.expect(")")
            return Unary(word, x), self.guard(t, self.scope.type_unary, word, xt)
        if word in BINARY_OPS:
            self.next()
            self.expect("(")
            a, at_ = self.expr(depth + 1)
            self.expect(",")
            b, bt = self.expr(depth + 1)
            self.expect(")")
            return Binary(word, a, b), self.guard(t, self.scope.type_binary, word, at_, bt)
        name, nt = self.name("value or buffer")
        if nxt.text == "[" and nxt.kind == "punct":
            index = self.access_index()
            buf = self.guard(nt, self.scope.index, name, tuple(index), "in")
            return Load(name, tuple(index)), buf.dtype
        if nxt.text == "(" and nxt.kind == "punct":
            raise self.fail(f"unknown operator {name!r}", nt)
        return Ref(name), self.guard(nt, self.scope.type_ref, name)

    def constant(self, dtype: str) -> Const:
        t = self.tok
        if t.kind != "num":
            raise self.fail(f"expected a number, found {self._describe(t)}")
        self.next()
        if dtype in FLOAT_DTYPES:
            v = float(t.text)
            if math.isinf(v) and t.text.lstrip("-") != "inf":
                raise self.fail(f"constant {t.text} overflows a float", t)
            misfit = float_misfit(dtype, v)
            if misfit is None and v == 0 and any(c in "123456789" for c in t.text.lower().split("e")[0]):
                misfit = f"is zero in {dtype} (below even a double's range): write 0.0"
            if misfit is not None:
                raise self.fail(f"constant {t.text} {misfit}", t)
            return Const(dtype, v)
        if not t.text.lstrip("-").isdigit():
            raise self.fail(f"{dtype} constant must be an integer, got {t.text}", t)
        v = int(t.text)
        limit = 2 ** (31 if dtype == "i32" else 63)
        if not -limit <= v < limit:
            raise self.fail(f"constant {t.text} does not fit {dtype}", t)
        return Const(dtype, v)


def _decode(text: str | bytes, source: str) -> str:
    if isinstance(text, bytes | bytearray | memoryview):
        raw = bytes(text)
        if len(raw) > MAX_TEXT_BYTES:
            raise ParseError(f"text is {len(raw)} bytes, over the limit of {MAX_TEXT_BYTES}", 1, 1, source)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = raw.count(b"\n", 0, exc.start) + 1
            col = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
            raise ParseError(f"invalid UTF-8 byte 0x{raw[exc.start]:02x}", line, col, source) from None
    if not isinstance(text, str):
        raise ParseError(f"expected text, got {type(text).__name__}", 1, 1, source)
    if len(text) > MAX_TEXT_BYTES:
        raise ParseError(f"text is {len(text)} characters, over the limit of {MAX_TEXT_BYTES}", 1, 1, source)
    return text


def parse(text: str | bytes, source: str = "<text>") -> Kernel:
    """Reads one kernel (a `kernel` or an `extern`) from text, checking every rule; raises `ParseError`."""
    return _Parser(_decode(text, source), source).kernel()
