"""Builders: every family builds a valid program, names are deterministic, inputs are refused strictly."""

from __future__ import annotations

import pytest

from emmy_core.ir import IRError, kernel_id, parse, render, validate
from emmy_core.ir.builders import (
    Dim,
    day_one_kernels,
    elementwise,
    layernorm,
    matmul,
    parse_expr,
    rmsnorm,
    softmax,
)


def test_day_one_kernels_cover_every_family_and_validate() -> None:
    kernels = day_one_kernels()
    labels = [label for label, _ in kernels]
    assert len(set(labels)) == len(labels)
    prefixes = {p.name.split("_")[0] for _, p in kernels}
    assert {"matmul", "rmsnorm", "softmax", "layernorm", "ew"} <= prefixes
    for _, program in kernels:
        validate(program)
        assert parse(render(program)) == program  # canonical text round-trips


def test_identical_kernels_share_an_identity_and_hints_do_not_change_it() -> None:
    a = matmul(Dim("T", 8), 64, 32, epilogue=("bias", "relu"))
    b = matmul("T", 64, 32, epilogue=("bias", "relu"), hints={"T": 4096})
    assert a.name == b.name
    assert kernel_id(a) == kernel_id(b)
    assert kernel_id(rmsnorm(hidden=64, batch_hint=1)) == kernel_id(rmsnorm(hidden=64, batch_hint=512))


def test_any_change_of_shape_dtype_or_epilogue_changes_identity() -> None:
    variants = [
        matmul(16, 32, 64), matmul(16, 32, 65), matmul(16, 32, 64, dtype="bf16"),
        matmul(16, 32, 64, epilogue=("relu",)), matmul(16, 32, 64, epilogue=("scale:0.5",)),
        matmul(16, 32, 64, epilogue=("scale:0.25",)), matmul(16, 32, 64, b_transposed=True),
        matmul(16, 32, 64, epilogue=("relu", "bias")), matmul(16, 32, 64, epilogue=("bias", "relu")),
        softmax(64), softmax(64, scale=0.5), layernorm(64), rmsnorm(64), rmsnorm(64, eps=1e-5),
        rmsnorm(64, prologue=("residual",)), elementwise("a+b", cols=64), elementwise("a*b", cols=64),
    ]
    assert len({kernel_id(v) for v in variants}) == len(variants)
    assert len({v.name for v in variants}) == len(variants)


def test_long_kernel_names_are_shortened_deterministically() -> None:
    ep = ("bias", "gelu_tanh", "scale:0.123456789", "residual", "mul", "silu")
    a = matmul(Dim("T", 8), 4096, 11008, batch=(Dim("B", 2), Dim("NH", extent=32)), epilogue=ep)
    b = matmul(Dim("T", 8), 4096, 11008, batch=(Dim("B", 2), Dim("NH", extent=32)), epilogue=ep)
    assert len(a.name) <= 64 and a.name == b.name
    validate(a)


@pytest.mark.parametrize(
    "call, fragment",
    [
        (lambda: matmul(8, 8, 8, epilogue=("swish",)), "unknown epilogue step"),
        (lambda: matmul(8, 8, 8, epilogue=("bias", "bias")), "can appear once"),
        (lambda: matmul(8, 8, 8, epilogue=("scale:nan",)), "finite"),
        (lambda: matmul(8, 8, 8, epilogue="relu"), "tuple of steps"),
        (lambda: matmul("T", 8, 8), "expected size"),
        (lambda: matmul(8, 8, 8, dtype="i32"), "not a floating type"),
        (lambda: matmul(Dim("T", 4), Dim("T", 8), 8), "different sizes"),
        (lambda: rmsnorm(64, prologue=("gate",)), "prologue"),
        (lambda: softmax(64, scale=float("inf")), "finite"),
    ],
)
def test_builders_refuse_bad_arguments_clearly(call, fragment: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(IRError, match=fragment):
        call()


@pytest.mark.parametrize(
    "text", ["__import__('os')", "a +", "foo(a)", "a b", "1e999", "(a", "max(a)", "a; b", "", "y+a", "exp"]
)
def test_elementwise_language_is_parsed_strictly(text: str) -> None:
    with pytest.raises(IRError):
        elementwise(text, cols=8)


def test_elementwise_language_precedence() -> None:
    assert parse_expr("a+b*c") == ("add", ("in", "a"), ("mul", ("in", "b"), ("in", "c")))
    assert parse_expr("-a*b") == ("mul", ("neg", ("in", "a")), ("in", "b"))
    assert parse_expr("a-b-c") == ("sub", ("sub", ("in", "a"), ("in", "b")), ("in", "c"))
    assert parse_expr("max(a, 0)") == ("max", ("in", "a"), ("num", 0.0))
    assert [b.name for b in elementwise("silu(g)*u", cols=8).inputs] == ["g", "u"]
