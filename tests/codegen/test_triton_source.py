"""Rules of the generated Triton source: validated names only, prefixed; exact constants; a digest-named
cache written whole; knobs checked per family; launch arguments checked.
"""

from __future__ import annotations

import ast
import hashlib
import math
import re
from pathlib import Path

import pytest
import torch

from emmy_core.codegen.backend import BuildError, LaunchError
from emmy_core.codegen.triton_gen import TritonBackend, build_dir, write_source
from emmy_core.ir import (
    Axis,
    Binary,
    Buffer,
    Const,
    Extern,
    IRError,
    Let,
    Load,
    Loop,
    Program,
    Reduce,
    Ref,
    Store,
    Unary,
    validate,
)
from emmy_core.ir.builders import Dim, elementwise, matmul, rmsnorm, softmax

PREFIXES = ("p_", "ext_", "v_", "val_", "k_")


def clashing_program() -> Program:
    """Every IR name here is also a name the generator or Triton uses (tl, triton, pid, offs, msk, t1...)."""
    body = (Loop("acc", "offs", (Loop("t1", "rm", (
        Let("t2", "f32", Binary("mul", Load("triton", ("acc", "t1")), Load("pid", ("t1",)))),
        Store("msk", ("acc", "t1"), Binary("add", Ref("t2"), Const("f32", 0.1))),
    )),)),)
    return validate(Program(  # type: ignore[return-value]
        "tl", (Axis("offs", None, 8), Axis("rm", 5)),
        (Buffer("triton", "in", "f32", ("offs", "rm")), Buffer("pid", "in", "f32", ("rm",)),
         Buffer("msk", "out", "f32", ("offs", "rm"))),
        body,
    ))


def ir_names(p: Program) -> dict[str, set[str]]:
    """IR names by the prefix they must carry in generated source."""
    names = {"k_": {p.name}, "ext_": {a.name for a in p.dynamic_axes}, "p_": {b.name for b in p.buffers},
             "v_": set(), "val_": set()}

    def walk(stmts: tuple) -> None:
        for s in stmts:
            if isinstance(s, Loop):
                names["v_"].add(s.var)
                walk(s.body)
            elif isinstance(s, Reduce):
                names["val_"].add(s.name)
                names["v_"].add(s.var)
            elif isinstance(s, Let):
                names["val_"].add(s.name)

    walk(p.body)
    return names


# what the generator itself may name: modules, builtins, its own variables, numbered temporaries
GENERATED = {"tl", "triton", "range", "float", "pid", "offs", "msk", "acc", "a", "b", "rm", "rn", "rk", "ram", "rbn",
             "kk", "klo", "khi", "kmask", "mm", "mn", "a_ptrs", "b_ptrs", "pid_z", "pid_m", "pid_n", "num_pid_m",
             "num_pid_n", "num_pid_in_group", "group_id", "first_pid_m", "group_size_m"}
TEMP = re.compile(r"(t|r|m|s|q|lo|acc)[0-9]+\Z")


@pytest.mark.parametrize("make", [clashing_program, lambda: rmsnorm(100, dtype="f16", prologue=("residual",)),
                                  lambda: matmul(Dim("T", 8), 17, 40, epilogue=("bias", "gelu"))])
def test_ir_identifiers_appear_only_with_a_prefix(make) -> None:
    program = make()
    src = TritonBackend().source(program, {}, "deploy")
    tree = ast.parse(src)
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    used |= {a.arg for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) for a in n.args.args}
    used |= {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    names = ir_names(program)
    every = set().union(*names.values())
    for ident in used:
        prefix = next((p for p in sorted(PREFIXES, key=len, reverse=True) if ident.startswith(p)), None)
        if prefix is not None:
            assert ident[len(prefix):] in names[prefix], f"{ident}: prefixed, but names no {prefix} thing"
        else:
            assert ident in GENERATED or TEMP.match(ident), f"{ident}: neither prefixed nor the generator's own"
    # a bare IR name never appears, unless the generator uses the same word for itself
    assert not {n for n in every if n in used and n not in GENERATED and not TEMP.match(n)}
    assert f"def k_{program.name}(" in src


def test_names_that_clash_with_generated_code_still_compute_right() -> None:
    program = clashing_program()
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(6, 5, generator=gen), torch.randn(5, generator=gen)
    y = torch.full((6, 5), float("nan"))
    TritonBackend().build(program, {"block": 16}, "deploy")({"triton": x, "pid": w, "msk": y}, {"offs": 6})
    torch.testing.assert_close(y, x * w + torch.tensor(0.1, dtype=torch.float32), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("hostile", [
    lambda p: Program("k\nimport os", p.axes, p.buffers, p.body),
    lambda p: Program(p.name, p.axes, (Buffer("x):\n    pass\nimport os\n#", "in", "f32", ("B", "C")), *p.buffers[1:]),
                      p.body),
    lambda p: Program(p.name, (Axis("B", None, 8), Axis("C); import os", 64)), p.buffers, p.body),
    lambda p: Program(p.name, p.axes, p.buffers, (Loop("i", "B", (Let("__import__", "f32", Const("f32", 1.0)),)),)),
    lambda p: Program(p.name, p.axes, p.buffers, (Loop("i", "B", (Loop("j", "C", (
        Store("y", ("i", "j"), Unary("system", Load("x", ("i", "j")))),)),)),)),
    lambda p: Program(p.name, p.axes, p.buffers, (Loop("i", "B", (Loop("j", "C", (
        Store("y", ("i", "j"), Binary("add", Load("x", ("i", "j")), Const("f32); import os", 1.0))),)),)),)),
])
def test_hostile_program_is_refused_by_validate_before_any_source(hostile) -> None:
    base = softmax(64, dtype="f32")
    with pytest.raises(IRError):
        TritonBackend().source(hostile(base), {}, "deploy")


def test_constants_are_printed_exactly() -> None:
    third = 1.0 / 3.0
    body = (Loop("i", "B", (Loop("j", "C", (
        Store("y", ("i", "j"), Binary("add", Binary("max", Load("x", ("i", "j")), Const("f32", -math.inf)),
                                      Binary("min", Const("f32", third), Const("f32", math.inf)))),)),)),)
    program = validate(Program("consts", (Axis("B", None, 4), Axis("C", 20)),
                               (Buffer("x", "in", "f32", ("B", "C")), Buffer("y", "out", "f32", ("B", "C"))), body))
    src = TritonBackend().source(program, {"block": 16}, "deploy")
    assert f"tl.full([], {third!r}, tl.float32)" in src
    assert 'tl.full([], -float("inf"), tl.float32)' in src and 'tl.full([], float("inf"), tl.float32)' in src
    x = torch.randn(3, 20)
    y = torch.full((3, 20), float("nan"))
    TritonBackend().build(program, {"block": 16}, "deploy")({"x": x, "y": y}, {"B": 3})
    torch.testing.assert_close(y, x + torch.tensor(third, dtype=torch.float32))


def test_source_is_cached_under_its_digest_written_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMMY_BUILD_CACHE", str(tmp_path))  # read at call time
    assert build_dir() == tmp_path / "triton"
    program = softmax(64, dtype="f32")
    src = TritonBackend().source(program, {"block": 32}, "deploy")
    built = TritonBackend().build(program, {"block": 32}, "deploy")
    digest = hashlib.sha256(src.encode()).hexdigest()
    assert built.path == tmp_path / "triton" / f"emmy_{digest}.py"
    assert built.path.read_text() == src
    assert [p.name for p in (tmp_path / "triton").iterdir()] == [built.path.name]  # no temp files left
    built.path.write_text(src.replace("tl.exp", "tl.log"))  # tampered: rewritten, never imported
    assert write_source(src) == built.path and built.path.read_text() == src
    assert TritonBackend().source(program, {"block": 32}, "rank") == src  # one kernel for both settings


@pytest.mark.parametrize("program,knobs,fault", [
    (softmax(64), {"block_m": 32}, "block_m"),
    (softmax(64), {"tile_m": 32}, "tile_m"),
    (softmax(64), {"block": 24}, "block"),
    (softmax(64), {"split:C": 2}, "split"),
    (matmul(16, 16, 16, dtype="f32"), {"acc": "f16"}, "acc=f16"),
    (matmul(16, 16, 16), {"block": 64}, "block"),
    (matmul(16, 16, 16), {"mma": "wgmma_m64n64k16", "num_warps": 2}, "wgmma"),
])
def test_knobs_outside_the_family_or_vocabulary_are_refused(program: Program, knobs: dict, fault: str) -> None:
    with pytest.raises(BuildError, match=fault):
        TritonBackend().source(program, knobs, "deploy")


def test_launch_arguments_are_checked() -> None:
    program = softmax(64, dtype="f32")
    built = TritonBackend().build(program, {"block": 64}, "deploy")
    x, y = torch.randn(3, 64), torch.empty(3, 64)
    with pytest.raises(LaunchError, match="must be f32"):
        built({"x": x.double(), "y": y}, {"B": 3})
    with pytest.raises(LaunchError, match="must be f32"):
        built({"x": x, "y": y}, {"B": 4})
    with pytest.raises(LaunchError, match="missing"):
        built({"x": x}, {"B": 3})
    with pytest.raises(LaunchError, match="contiguous"):
        built({"x": torch.randn(64, 3).t(), "y": y}, {"B": 3})
    with pytest.raises(LaunchError, match="not dynamic axes"):
        built({"x": x, "y": y}, {"B": 3, "Q": 1})
    built({"x": x, "y": y}, {"B": 3})
    torch.testing.assert_close(y, torch.softmax(x, -1))
    # the checked launch is reused only for the very same arguments
    with pytest.raises(LaunchError, match="must be f32"):
        built({"x": x.double(), "y": y}, {"B": 3})
    y2 = torch.full((3, 64), float("nan"))
    built({"x": x * 2, "y": y2}, {"B": 3})
    torch.testing.assert_close(y2, torch.softmax(x * 2, -1))
    x.mul_(3)  # same tensor, new values: launched again on them
    built({"x": x, "y": y}, {"B": 3})
    torch.testing.assert_close(y, torch.softmax(x, -1))


def test_extern_and_unfamiliar_kernels_are_build_errors() -> None:
    body = (Loop("i", "B", (Reduce("s", "f32", "sum", "j", "C", Load("x", ("i", "j"))),
                            Loop("j", "C", (Loop("k", "C", (Store("y", ("i", "j"), Ref("s")),)),)))),)
    program = validate(Program("odd", (Axis("B", None, 4), Axis("C", 8)),
                               (Buffer("x", "in", "f32", ("B", "C")), Buffer("y", "out", "f32", ("B", "C"))), body))
    with pytest.raises(BuildError, match=r"no Triton template|lets and stores"):
        TritonBackend().source(program, {}, "deploy")
    with pytest.raises(BuildError, match="extern"):
        TritonBackend().source(Extern("gemm_kt", (64, 64), "ab" * 32), {}, "deploy")  # type: ignore[arg-type]


def test_sizes_whose_indices_overflow_int32_are_launch_errors() -> None:
    built = TritonBackend().build(elementwise("a*2", dtype="f32", cols=1 << 16), {"block": 1024}, "deploy")
    with pytest.raises(LaunchError, match="overflows int32"):
        built.grid({"B": 1 << 15, "C": 1 << 16})  # 2^31 elements: tensors that large are never made here
    assert built.grid({"B": (1 << 15) - 1, "C": 1 << 16}) == (((1 << 15) - 1) * 64,)
