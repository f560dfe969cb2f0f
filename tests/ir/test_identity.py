"""Exact identity: what changes a kernel's identity and what does not (DESIGN.md section 3)."""

from __future__ import annotations

import dataclasses

import pytest

from emmy_core.ir import Axis, Binary, Const, Extern, Loop, Store, identity, kernel_id, parse, render

BASE = """kernel scale_add {
  axis B = dyn(8)
  axis H = 64
  in x: f16[B, H]
  in r: f16[B, H]
  out y: f16[B, H]
  for b in B {
    for h in H {
      y[b, h] = add(mul(x[b, h], const(f16, 2.0)), r[b, h])
    }
  }
}
"""


def variant(old: str, new: str) -> str:
    assert old in BASE
    return BASE.replace(old, new)


def test_changing_only_an_expected_size_keeps_the_identity() -> None:
    assert kernel_id(parse(BASE)) == kernel_id(parse(variant("dyn(8)", "dyn(4096)")))


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("axis H = 64", "axis H = 128"),  # an extent constant
        ("add(mul", "sub(mul"),  # an operator
        ("in x: f16", "in x: f32"),  # a dtype (the store follows suit below)
        ("const(f16, 2.0)", "const(f16, 3.0)"),  # a constant
        ("dyn(8)", "64"),  # a dynamic axis made static
    ],
)
def test_changing_the_program_changes_the_identity(old: str, new: str) -> None:
    changed = variant(old, new)
    if "in x: f32" in changed:
        changed = changed.replace("mul(x[b, h]", "mul(cast(f16, x[b, h])")
    assert kernel_id(parse(BASE)) != kernel_id(parse(changed))


def test_changing_a_buffer_role_changes_the_identity() -> None:
    p = parse(BASE)
    flipped = dataclasses.replace(p, buffers=(p.buffers[0], dataclasses.replace(p.buffers[1], role="out"), p.buffers[2]))
    assert kernel_id(flipped) != kernel_id(p)
    swapped = dataclasses.replace(p, buffers=(p.buffers[1], p.buffers[0], p.buffers[2]))
    assert kernel_id(swapped) != kernel_id(p)


def test_changing_statement_order_changes_the_identity() -> None:
    a = parse(BASE.replace("in r: f16[B, H]\n  out y: f16[B, H]", "out y: f16[B, H]\n  out z: f16[B, H]")
              .replace("y[b, h] = add(mul(x[b, h], const(f16, 2.0)), r[b, h])",
                       "y[b, h] = x[b, h]\n      z[b, h] = neg(x[b, h])"))
    body = a.body[0].body[0]
    swapped = dataclasses.replace(
        a, body=(Loop("b", "B", (Loop("h", "H", (body.body[1], body.body[0])),)),)
    )
    assert render(swapped) != render(a)
    assert kernel_id(swapped) != kernel_id(a)


def test_whitespace_and_comments_do_not_change_the_identity() -> None:
    noisy = "# a header comment\n" + BASE.replace("\n  ", "\n\t\t ").replace("{\n", "{  # open\n").replace(
        ", ", " ,   "
    )
    assert kernel_id(parse(noisy)) == kernel_id(parse(BASE))
    assert render(parse(noisy)) == BASE


def test_identity_version_is_part_of_the_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    p = parse(BASE)
    before = kernel_id(p)
    monkeypatch.setattr(identity, "IDENTITY_VERSION", identity.IDENTITY_VERSION + 1)
    assert kernel_id(p) != before


def test_identity_is_sha256_hex() -> None:
    k = kernel_id(parse(BASE))
    assert len(k) == 64 and set(k) <= set("0123456789abcdef")


def test_extern_kernels_follow_the_same_identity_rules() -> None:
    e = Extern("Xgemm", (4096, 4096), "ab" * 32)
    assert parse(render(e)) == e
    assert kernel_id(e) == kernel_id(parse(render(e).replace("\n  ", "\n    # c\n  ")))
    assert kernel_id(e) != kernel_id(Extern("Xgemm", (4096, 2048), "ab" * 32))
    assert kernel_id(e) != kernel_id(Extern("Xgemm", (4096, 4096), "cd" * 32))
    assert kernel_id(e) != kernel_id(Extern("Ygemm", (4096, 4096), "ab" * 32))


def test_built_and_parsed_programs_share_identity() -> None:
    built = parse(BASE)
    again = type(built)(
        "scale_add",
        (Axis("B", None, 2), Axis("H", 64)),
        built.buffers,
        (Loop("b", "B", (Loop("h", "H", (Store("y", ("b", "h"), Binary("add", Binary(
            "mul", built.body[0].body[0].body[0].value.a.a, Const("f16", 2)), built.body[0].body[0].body[0].value.b)),
        )),)),),
    )
    assert kernel_id(again) == kernel_id(built)
