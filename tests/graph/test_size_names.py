"""`SizeNames.evaluate`: a group's named sizes from the values its inputs show, in integers where it can be."""

from __future__ import annotations

import sympy

from emmy_core.graph.dynamo_graph import SizeNames


def _names(**exprs: sympy.Expr) -> SizeNames:
    names = SizeNames()
    names.exprs.update(exprs)
    return names


def test_linear_sizes_are_worked_out_in_integers() -> None:
    s, t = sympy.symbols("s0 s1", integer=True, positive=True)
    names = _names(d0=s, d1=2 * s, d2=s + t + 1, d3=3 * t - 2)
    assert names.evaluate({s: 7, t: 5}) == {"d0": 7, "d1": 14, "d2": 13, "d3": 13}
    # each new value gives its own answer (nothing kept from the last one)
    assert names.evaluate({s: 1, t: 40}) == {"d0": 1, "d1": 2, "d2": 42, "d3": 118}


def test_a_size_an_input_shows_as_it_is_is_read_there() -> None:
    s = sympy.symbols("s0", integer=True, positive=True)
    shown = sympy.floor(s / 5) - 1  # a convolution's output length: not linear, read from an input's shape
    names = _names(d0=shown)
    assert names.evaluate({shown: 9}) == {"d0": 9}


def test_a_size_that_is_not_linear_is_substituted_by_sympy() -> None:
    s = sympy.symbols("s0", integer=True, positive=True)
    names = _names(d0=sympy.floor(s / 2), d1=s * s)
    assert names.evaluate({s: 9}) == {"d0": 4, "d1": 81}


def test_a_name_added_after_a_call_is_worked_out_too() -> None:
    s = sympy.symbols("s0", integer=True, positive=True)
    names = _names(d0=s)
    assert names.evaluate({s: 3}) == {"d0": 3}
    names.exprs["d1"] = s + 4
    assert names.evaluate({s: 3}) == {"d0": 3, "d1": 7}
