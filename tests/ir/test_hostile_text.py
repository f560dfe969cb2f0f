"""Hostile text is refused with a ParseError naming line and column, never another exception."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emmy_core.ir import ParseError, parse
from emmy_core.ir.text import MAX_TEXT_BYTES

GOOD = """kernel k {
  axis B = dyn(8)
  in x: f32[B]
  out y: f32[B]
  for b in B {
    y[b] = x[b]
  }
}
"""


def refused(text: str | bytes) -> ParseError:
    with pytest.raises(ParseError) as info:
        parse(text)
    err = info.value
    assert err.line >= 1 and err.column >= 1
    assert f":{err.line}:{err.column}:" in str(err)
    return err


@pytest.mark.parametrize(
    ("needle", "replacement", "line"),
    [
        ("in x:", 'in "x":', 3),  # quotes
        ("y[b] = x[b]", "y[b] = x[b];", 6),  # semicolon
        ("in x:", "in x\n__import__:", 4),  # newline then a dunder name
        ("in x:", "in __class__:", 3),  # dunder
        ("in x:", "in import:", 3),  # a Python keyword
        ("in x:", "in int:", 3),  # a C keyword
        ("in x:", "in print:", 3),  # a builtin
        ("kernel k", "kernel k; import os", 1),
        ("x[b]\n", "x[b] ]\n", 6),
        ("f32[B]\n  out", "f99[B]\n  out", 3),
        ("y[b] = x[b]", "y[b] = exp(x[b], x[b])", 6),
        ("y[b] = x[b]", "y[b] = eval(x[b])", 6),
        ("axis B = dyn(8)", "axis B = dyn(0)", 2),
        ("axis B = dyn(8)", "axis B = 99999999999", 2),
    ],
)
def test_hostile_text_is_refused_with_line_and_column(needle: str, replacement: str, line: int) -> None:
    err = refused(GOOD.replace(needle, replacement, 1))
    assert err.line == line


def test_identifier_over_64_characters_is_refused() -> None:
    refused(GOOD.replace("in x:", "in " + "a" * 65 + ":"))


def test_deep_nesting_is_refused_not_a_recursion_error() -> None:
    deep = "neg(" * 5000 + "x[b]" + ")" * 5000
    err = refused(GOOD.replace("y[b] = x[b]", f"y[b] = {deep}"))
    assert "deeper" in err.message


def test_deep_loop_nesting_is_refused() -> None:
    loops = "".join(f"for i{n} in B {{\n" for n in range(40))
    err = refused(GOOD.replace("for b in B {\n", loops + "for b in B {\n"))
    assert "deeper" in err.message or "nest" in err.message


def test_ten_megabyte_input_is_refused_before_reading() -> None:
    big = GOOD + "#" * (10 * 1024 * 1024)
    err = refused(big)
    assert str(MAX_TEXT_BYTES) in err.message
    refused(big.encode())


def test_invalid_utf8_is_refused_with_its_position() -> None:
    err = refused(GOOD.encode().replace(b"in x", b"in \xff\xfe"))
    assert (err.line, err.column) == (3, 6)


def test_long_token_is_refused() -> None:
    refused(GOOD.replace("dyn(8)", "dyn(" + "9" * 10_000 + ")"))


def test_unterminated_program_is_refused() -> None:
    refused(GOOD[: len(GOOD) // 2])


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_raise_only_parse_error(data: bytes) -> None:
    try:
        parse(data)
    except ParseError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.integers(0, len(GOOD) - 1), st.text(max_size=5))
def test_mutated_programs_raise_only_parse_error(pos: int, junk: str) -> None:
    try:
        parse(GOOD[:pos] + junk + GOOD[pos + 1:])
    except ParseError:
        pass


@pytest.mark.parametrize(("constant", "says"), [
    ("const(f16, 1e10)", "does not fit f16 (largest 65504)"),
    ("const(f16, -70000.0)", "does not fit f16"),
    ("const(f32, 1e39)", "does not fit f32"),
    ("const(f32, 1e-400)", "is zero in f32"),
    ("const(f32, 1e-50)", "is zero in f32"),
    ("const(f16, 1e-9)", "is zero in f16"),
])
def test_a_float_constant_its_type_cannot_hold_is_refused_not_rounded(constant: str, says: str) -> None:
    text = GOOD.replace("y[b] = x[b]", f"y[b] = mul(x[b], {constant})", 1)
    err = refused(text)
    assert says in str(err) and err.line == 6


@pytest.mark.parametrize("constant", ["cast(f32, const(f16, 65504.0))", "cast(f32, const(f16, -inf))",
                                      "const(f32, 0.0)", "const(f32, 1e-45)", "cast(f32, const(f16, 6e-08))",
                                      "const(f32, 1e-06)"])
def test_a_float_constant_at_the_edge_of_its_type_is_taken(constant: str) -> None:
    parse(GOOD.replace("y[b] = x[b]", f"y[b] = mul(x[b], {constant})", 1))
