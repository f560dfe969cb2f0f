"""A compiled model computes what the module computes, on generated kernels (C on the CPU, Triton
under its interpreter), at the example sizes and at other sizes; buffers are kept per size.

Tolerances: f32 within 1e-4 (absolute and relative); f16 within 1e-2 (about eight f16 steps at
the outputs' magnitude; torch's own CPU f16 kernels round intermediates differently).
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import emmy_core
from emmy_core.compiler import TooLarge
from emmy_core.graph.errors import UnsupportedOp
from emmy_core.graph.models import build_model

TOL = {torch.float32: 1e-4, torch.float16: 1e-2}
EXAMPLE = {"B": 2, "S": 8}
OTHERS = ({"B": 1, "S": 3}, {"B": 3, "S": 17})


class UserBlock(nn.Module):
    """A user's own module of supported ops: norm, gated projection, a transpose, a row mean; two outputs."""

    def __init__(self, hidden: int = 48) -> None:
        super().__init__()
        self.w = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))
        self.gate = nn.Linear(hidden, hidden)
        self.up = nn.Linear(hidden, hidden, bias=False)
        self.mix = nn.Linear(hidden, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.w
        g = F.gelu(self.gate(h), approximate="tanh") * self.up(h)
        t = torch.transpose(g, 1, 2)  # [B, H, S]: laid out by torch between kernels
        y = x + self.mix(torch.transpose(t, 1, 2))
        return y, torch.softmax(y * 0.5, dim=-1).mean(-1)


def _user(dtype: torch.dtype):  # type: ignore[no-untyped-def]
    torch.manual_seed(3)
    module = UserBlock().to(dtype).eval()

    def inputs(shape: dict[str, int]) -> tuple[torch.Tensor, ...]:
        return (torch.randn(shape["B"], shape["S"], 48, generator=torch.Generator().manual_seed(7)).to(dtype),)

    return module, inputs


def _model(name: str, dtype: torch.dtype):  # type: ignore[no-untyped-def]
    return _user(dtype) if name == "user" else build_model(name, dtype)


def _compile(module: nn.Module, example: tuple[torch.Tensor, ...], **kw):  # type: ignore[no-untyped-def]
    kw.setdefault("prior", False)
    kw.setdefault("freezes", [])
    kw.setdefault("tuning_db", "/nonexistent/emmy-test.db")
    kw.setdefault("torch_ops", "refuse")  # the one-graph mode these rules are about
    return emmy_core.compile(module, example, **kw).one_graph


def _assert_equal(got: object, want: object, dtype: torch.dtype) -> None:
    gots = got if isinstance(got, tuple) else (got,)
    wants = want if isinstance(want, tuple) else (want,)
    assert len(gots) == len(wants)
    for g, w in zip(gots, wants, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype  # type: ignore[union-attr]
        torch.testing.assert_close(g, w, rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("name", ["llama_block", "mlp", "user"])
def test_compiled_for_the_cpu_equals_torch_at_the_example_and_two_other_sizes(name: str, dtype: torch.dtype) -> None:
    module, inputs = _model(name, dtype)
    compiled = _compile(module, inputs(EXAMPLE))
    assert compiled.card.target == "cpu" and compiled.builder is not None
    assert type(compiled.builder.backend).__name__ == "CBackend"  # generated C, never the interpreter
    for shape in (EXAMPLE, *OTHERS):
        x = inputs(shape)
        with torch.no_grad():
            want = module(*x)
        _assert_equal(compiled(*x), want, dtype)
    assert compiled.record.sizes == ["B=2,S=8", "B=1,S=3", "B=3,S=17"]


@pytest.mark.parametrize("name", ["llama_block", "mlp", "user"])
def test_under_the_triton_interpreter_it_equals_torch_at_small_sizes(name: str) -> None:
    from emmy_core.codegen.triton_gen import interpreting

    if not interpreting():
        pytest.skip("Triton's interpreter is off in this process")
    module, inputs = _model(name, torch.float32)
    compiled = _compile(module, inputs({"B": 1, "S": 4}), card="NVIDIA H200")
    assert type(compiled.builder.backend).__name__ == "TritonBackend"  # type: ignore[union-attr]
    for shape in ({"B": 1, "S": 4}, {"B": 2, "S": 3}):
        x = inputs(shape)
        with torch.no_grad():
            want = module(*x)
        _assert_equal(compiled(*x), want, torch.float32)


def test_buffers_are_allocated_once_per_size_and_results_are_never_overwritten() -> None:
    module, inputs = build_model("mlp", torch.float32)
    compiled = _compile(module, inputs(EXAMPLE))
    a, b = inputs(EXAMPLE), (inputs(EXAMPLE)[0] * 2,)
    ya = compiled(*a)
    runner = compiled.runner(EXAMPLE)
    pool = {k: t.data_ptr() for k, t in runner._pool.items()}
    assert pool, "the intermediates live in the pool"
    yb = compiled(*b)
    assert compiled.runner(EXAMPLE) is runner and {k: t.data_ptr() for k, t in runner._pool.items()} == pool
    with torch.no_grad():
        _assert_equal(ya, module(*a), torch.float32)  # the first result survived the second call
        _assert_equal(yb, module(*b), torch.float32)
    assert ya.data_ptr() != yb.data_ptr()


def test_forks_are_resolved_once_per_distinct_size() -> None:
    module, inputs = build_model("mlp", torch.float32)
    compiled = _compile(module, inputs(EXAMPLE))
    n = len(compiled.record.resolutions)
    for _ in range(2):
        compiled(*inputs(EXAMPLE))
    assert len(compiled.record.resolutions) == n and compiled.record.sizes == ["B=2,S=8"]
    compiled(*inputs({"B": 1, "S": 5}))
    compiled(*inputs({"B": 1, "S": 5}))
    assert len(compiled.record.resolutions) == 2 * n and compiled.record.sizes == ["B=2,S=8", "B=1,S=5"]


def test_a_call_whose_buffers_do_not_fit_is_refused_before_allocating_naming_the_bytes() -> None:
    module, inputs = build_model("llama_block", torch.float16)
    compiled = _compile(module, inputs(EXAMPLE))
    long = {"B": 1, "S": 1 << 17}  # 64 MiB of input; the attention scores alone would be 128 GiB
    need = compiled.layout(long).nbytes
    assert need > 4 * (1 << 17) ** 2 * 2
    with pytest.raises(TooLarge) as info:
        compiled(*inputs(long))
    assert f"{need:,} bytes" in str(info.value) and "refused before allocating" in str(info.value)
    assert "B=1,S=131072" not in compiled._runners


def test_an_unsupported_op_names_the_op_and_the_model_line() -> None:
    class UsesCumsum(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cumsum(x, dim=-1) + 1.0  # the line at fault

    with pytest.raises(UnsupportedOp) as info:
        _compile(UsesCumsum(), (torch.randn(2, 3, 8),))
    assert "cumsum" in info.value.op and "the line at fault" in info.value.source


def test_inputs_of_another_type_or_shape_are_refused_naming_the_input() -> None:
    module, inputs = build_model("mlp", torch.float32)
    compiled = _compile(module, inputs(EXAMPLE))
    from emmy_core.graph.errors import GraphError

    with pytest.raises(GraphError, match="expects f32"):
        compiled(inputs(EXAMPLE)[0].half())
    with pytest.raises(GraphError, match="expects f32"):
        compiled(torch.randn(2, 8, 7))


def test_without_a_prior_the_compile_warns_once() -> None:
    module, inputs = build_model("mlp", torch.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = _compile(module, inputs(EXAMPLE), prior="/nonexistent/prior.json")
        compiled(*inputs({"B": 1, "S": 2}))
    mine = [w for w in caught if issubclass(w.category, emmy_core.PriorUnavailableWarning)]
    assert len(mine) == 1 and "no prior" in str(mine[0].message)
