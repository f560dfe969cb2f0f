"""The loop-program parser fed hostile text (every day-one kernel, cut, with bytes flipped, inserted or
repeated, tokens swapped): only its own IRError, with a bounded message; text it accepts prints back
to a program it reads again the same."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from emmy_core.ir import IRError, parse, render
from emmy_core.ir.builders import day_one_kernels
from tests.faults.corpus import mutate_bytes

TEXTS = [render(k) for _, k in day_one_kernels()]
TOKENS = ["kernel", "axis", "dyn", "(", ")", "{", "}", "[", "]", ",", "=", "in", "out", "for", "reduce", "let",
          "sum", "max", "const", "cast", "f16", "f32", "bf16", "i32", "import", "__import__", "exec", "0", "-1",
          "1e999", "nan", "inf", "9" * 40, "x" * 70, "\n", "#", "\t", "é", "\x00"]


def check(text: str | bytes) -> None:
    try:
        program = parse(text)
    except IRError as exc:
        assert len(str(exc)) < 2000
        return
    again = render(program)
    assert render(parse(again)) == again


@settings(max_examples=200, deadline=None)
@given(st.integers(0, len(TEXTS) - 1), st.integers(0, 2**32 - 1), st.integers(1, 3))
def test_hostile_loop_programs_raise_only_ir_errors(which: int, seed: int, edits: int) -> None:
    rng = random.Random(seed)
    data = TEXTS[which].encode()
    for _ in range(edits):
        data = mutate_bytes(data, rng)
    check(data)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, len(TEXTS) - 1), st.lists(st.tuples(st.floats(0, 1), st.sampled_from(TOKENS)), min_size=1,
                                                max_size=4))
def test_loop_programs_with_tokens_swapped_raise_only_ir_errors(which: int, swaps: list) -> None:
    words = TEXTS[which].split(" ")
    for where, token in swaps:
        words[int(where * (len(words) - 1))] = token
    check(" ".join(words))
