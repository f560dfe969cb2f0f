"""Structural facts are pure functions of a program and concrete sizes."""

from __future__ import annotations

import pytest

from emmy_core.ir import IRError, facts, format_sizes, parse, parse_sizes

RMS = """kernel rms {
  axis B = dyn(8)
  axis H = 64
  in x: f16[B, H]
  in w: f16[H]
  out y: f16[B, H]
  for b in B {
    reduce ss: f32 = sum(h in H) mul(cast(f32, x[b, h]), cast(f32, x[b, h]))
    let r: f32 = rsqrt(add(div(ss, const(f32, 64.0)), const(f32, 1e-06)))
    for h in H {
      y[b, h] = cast(f16, mul(mul(cast(f32, x[b, h]), r), cast(f32, w[h])))
    }
  }
}
"""


def test_facts_count_statements_and_operations() -> None:
    f = facts(parse(RMS), {"B": 4})
    assert f.statements == {"let": 1, "loop": 2, "reduce": 1, "store": 1}
    assert f.operations["mul"] == 3 and f.operations["load"] == 4 and f.operations["cast"] == 5
    assert f.loop_extents == (4, 64, 64)
    assert f.dtypes == ("f16",) and f.max_width == 16
    assert f.bytes_moved == (4 * 64 * 2) * 2 + 64 * 2
    # reduce: 4 rows * 64 * (1 mul + 1 add); let: 4 * 3 ops; store: 4 * 64 * 2 muls
    assert f.flops == 4 * 64 * 2 + 4 * 3 + 4 * 64 * 2
    assert f.intensity == pytest.approx(f.flops / f.bytes_moved)


def test_facts_scale_with_sizes_and_default_to_the_expected_size() -> None:
    p = parse(RMS)
    assert facts(p).sizes == {"B": 8}
    assert facts(p, {"B": 16}).bytes_moved > facts(p, {"B": 8}).bytes_moved
    with pytest.raises(IRError, match="not dynamic axes"):
        facts(p, {"H": 3})


def test_windowed_reduction_counts_its_window() -> None:
    text = RMS.replace("sum(h in H)", "sum(h in H[b * 16 : 16])")
    assert facts(parse(text), {"B": 1}).loop_extents == (1, 16, 64)


@pytest.mark.parametrize("bad", ["B", "B=", "B=x", "B=1,B=2", "__x=1", "B=0", "B=1;S=2", "B=99999999999"])
def test_sizes_text_is_parsed_strictly(bad: str) -> None:
    with pytest.raises(IRError):
        parse_sizes(bad)


def test_sizes_text_is_canonical() -> None:
    assert format_sizes(parse_sizes("S=512,B=8")) == "B=8,S=512"
    assert parse_sizes("") == {}


@pytest.mark.parametrize("big", ["99999999999", "9" * 5000])
def test_a_size_too_large_gets_the_range_message_not_the_format_one(big: str) -> None:
    with pytest.raises(IRError, match=r"size B=[0-9]+(\.\.\.)? out of 1\.\.2147483647"):
        parse_sizes(f"B={big},S=1")
