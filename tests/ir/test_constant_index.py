"""Rule: an index may be a constant position inside a static axis (the halves of rotary's last axis), checked at
parse and build like a loop variable, and computed alike by the interpreter and the generated C."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from emmy_core.codegen.c import CBackend
from emmy_core.ir import ParseError, parse, render
from emmy_core.ir.interpret import run

ROTATE_HALF = """kernel rotate_half {
  axis B = dyn(4)
  axis P = 2
  axis H = 3
  in x: f32[B, P, H]
  out y: f32[B, P, H]
  for i in B {
    for h in H {
      y[i, 0, h] = neg(x[i, 1, h])
      y[i, 1, h] = x[i, 0, h]
    }
  }
}
"""


def test_a_constant_index_round_trips_through_the_canonical_text() -> None:
    program = parse(ROTATE_HALF)
    assert render(program) == ROTATE_HALF
    assert program.body[0].body[0].body[0].index == ("i", 0, "h")  # type: ignore[union-attr]


@pytest.mark.parametrize(("needle", "replacement", "why"), [
    ("y[i, 1, h]", "y[i, 2, h]", "outside axis 'P'"),
    ("x[i, 0, h]", "x[0, 0, h]", "axis 'B' is dynamic"),
    ("x[i, 1, h]", "x[i, -1, h]", "index position must be in 0.."),
])
def test_a_constant_index_outside_its_static_axis_is_refused_at_its_line(needle: str, replacement: str,
                                                                         why: str) -> None:
    with pytest.raises(ParseError, match=why) as info:
        parse(ROTATE_HALF.replace(needle, replacement))
    assert info.value.line in (9, 10)


def test_a_constant_index_computes_the_same_in_the_interpreter_and_in_c(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("EMMY_BUILD_CACHE", str(tmp_path))
    program = parse(ROTATE_HALF)
    x = torch.randn(5, 2, 3, generator=torch.Generator().manual_seed(0))
    want = torch.cat([-x[:, 1:], x[:, :1]], 1)
    got = run(program, {"x": x.numpy()}, {"B": 5})["y"]
    np.testing.assert_array_equal(got, want.numpy())
    y = torch.full((5, 2, 3), float("nan"))
    CBackend().build(program, {"vec": 4, "threads": 2}, "rank")({"x": x, "y": y}, {"B": 5})
    assert torch.equal(y, want)
