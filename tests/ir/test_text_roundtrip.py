"""The printer and the parser are inverses on canonical text (property-tested)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from emmy_core.ir import parse, render, validate
from tests.ir.strategies import programs


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_parse_of_render_is_the_program(p) -> None:  # type: ignore[no-untyped-def]
    validate(p)
    assert parse(render(p)) == p


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_render_of_parse_is_the_canonical_text(p) -> None:  # type: ignore[no-untyped-def]
    text = render(p)
    assert render(parse(text)) == text


def test_canonical_text_is_stable_for_a_known_program() -> None:
    text = (
        "kernel rms {\n  axis B = dyn(8)\n  axis H = 64\n  in x: f32[B, H]\n  out y: f32[B, H]\n"
        "  for b in B {\n    reduce ss: f32 = sum(h in H[b * 2 + 1 : 16]) mul(x[b, h], x[b, h])\n"
        "    for h in H {\n      y[b, h] = mul(x[b, h], rsqrt(add(ss, const(f32, 1e-06))))\n    }\n  }\n}\n"
    )
    assert render(parse(text)) == text
