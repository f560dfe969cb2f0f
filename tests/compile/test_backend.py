"""The `emmy` Dynamo backend's rules: torch runs what Emmy does not lower, weights are followed, sizes stay dynamic,
groups are checked against torch, and the direct API (`emmy_core.compile`, whose default is this path) agrees
with it bit for bit."""

from __future__ import annotations

import json
import tomllib
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import emmy_core
from emmy_core.compiler.backend import GraphReport, compile_reports, emmy_backend
from emmy_core.compiler.compare import check_outputs
from emmy_core.compiler.group import EmmyGroup
from emmy_core.graph.attention import DECODE
from emmy_core.graph.errors import UnsupportedOp

ROOT = Path(__file__).resolve().parents[2]
H = 32


@pytest.fixture(autouse=True)
def fresh_dynamo() -> None:
    torch._dynamo.reset()


class Block(nn.Module):
    """RMSNorm, a SiLU-gated MLP and a residual: every op Emmy lowers, no graph break."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(H, eps=1e-6)
        self.gate = nn.Linear(H, 2 * H, bias=False)
        self.up = nn.Linear(H, 2 * H, bias=False)
        self.down = nn.Linear(2 * H, H, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class WithCumsum(nn.Module):
    """A linear, an op Emmy has no kernel for (cumsum), a linear."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(H, H)
        self.b = nn.Linear(H, H)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.cumsum(F.relu(self.a(x)), dim=1))


class Doubled(nn.Module):
    """A reference that is not what Emmy computes: twice the real one."""

    def __init__(self, real: nn.Module) -> None:
        super().__init__()
        self.real = real

    def forward(self, *args: object) -> tuple[torch.Tensor, ...]:
        return tuple(2 * t for t in self.real(*args))


class Attention(nn.Module):
    """Causal attention with grouped-query heads, and attention under a float and a boolean mask."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor,
                keep: torch.Tensor) -> tuple[torch.Tensor, ...]:
        kv = k[:, :2], v[:, :2]
        return (F.scaled_dot_product_attention(q, *kv, is_causal=True, enable_gqa=True),
                F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=0.3),
                F.scaled_dot_product_attention(q, k, v, attn_mask=keep))


class Scaled(nn.Module):
    """A float attribute Dynamo lifts to an input under dynamic shapes (as it does a norm's eps)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(H, H)
        self.scale = 0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.lin(x)) * self.scale


class Heads(nn.Module):
    """A projection split into heads and transposed for an op Emmy does not lower (cumsum over the sequence), as a
    Llama layer hands its value heads to torch's attention; `contiguous` asks for the transposed copy instead."""

    def __init__(self, contiguous: bool = False) -> None:
        super().__init__()
        self.v = nn.Linear(H, H, bias=False)
        self.contiguous = contiguous

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.v(x).view(x.shape[0], x.shape[1], 4, H // 4).transpose(1, 2)
        return torch.cumsum(h.contiguous() if self.contiguous else h, dim=2)


def _since(before: int) -> list[GraphReport]:
    return compile_reports()[before:]


def test_an_op_emmy_does_not_lower_runs_as_torch_and_the_report_names_it() -> None:
    torch.manual_seed(0)
    m = WithCumsum().eval()
    before = len(compile_reports())
    c = torch.compile(m, backend=emmy_backend(defer=False, prior=False, library=False))
    x = torch.randn(2, 5, H)
    with torch.no_grad():
        torch.testing.assert_close(c(x), m(x), rtol=1e-5, atol=1e-5)
    (report,) = _since(before)
    fell = {f.op: f.reason for f in report.fell_back}
    assert "torch.cumsum" in fell and "no kernel" in fell["torch.cumsum"]
    assert report.ops_on_emmy >= 3 and report.matmul_flops == report.matmul_flops_on_emmy == 2 * 2 * (2 * 5 * H * H)
    assert "torch.cumsum" in emmy_core.compiler.coverage.render_reports([report])


def test_a_weight_edited_in_place_after_compile_is_followed() -> None:
    torch.manual_seed(0)
    m = Block().eval()
    c = torch.compile(m, backend=emmy_backend(defer=False, prior=False, library=False))
    x = torch.randn(2, 5, H)
    with torch.no_grad():
        torch.testing.assert_close(c(x), m(x), rtol=1e-5, atol=1e-5)
        m.down.weight.mul_(3.0)
        m.norm.weight.add_(0.5)
        torch.testing.assert_close(c(x), m(x), rtol=1e-5, atol=1e-5)
    (report,) = compile_reports()[-1:]
    assert report.matmul_flops_on_emmy == report.matmul_flops > 0


def test_recompiles_are_bounded_ten_sequence_lengths_at_most_two_graph_compilations() -> None:
    """Counted with the backend resolving only (no kernel builds); the Llama layer's model test runs ten lengths
    built and checked against eager."""
    torch.manual_seed(0)
    m = Block().eval()
    before = len(compile_reports())
    c = torch.compile(m, backend=emmy_backend(defer=False, prior=False, library=False, build=False))
    with torch.no_grad():
        for s in range(2, 12):
            c(torch.randn(3, s, H))
    reports = _since(before)
    assert 1 <= len(reports) <= 2, [r.name for r in reports]
    assert reports[-1].sizes and reports[-1].matmul_flops_on_emmy == reports[-1].matmul_flops
    assert reports[-1].matmul_flops == 2 * 3 * 11 * (3 * H * 2 * H)  # at the size it last ran


def test_the_strict_one_graph_compile_and_the_backend_agree_bit_for_bit() -> None:
    torch.manual_seed(0)
    m = Block().eval()
    x = torch.randn(2, 5, H)
    direct = emmy_core.compile(m, (x,), prior=False, library=False, torch_ops="refuse")
    c = torch.compile(m, backend=emmy_backend(prior=False, library=False, defer=False), dynamic=True)
    with torch.no_grad():
        for s in (5, 9):
            y = torch.randn(2, s, H)
            assert torch.equal(direct(y), c(y))


def test_the_direct_api_on_the_dynamo_path_agrees_bit_for_bit_and_explains_what_runs_where() -> None:
    torch.manual_seed(0)
    m = WithCumsum().eval()
    x = torch.randn(2, 5, H)
    direct = emmy_core.compile(m, (x,), prior=False, library=False, defer=False)  # the Dynamo path
    c = torch.compile(m, backend=emmy_backend(defer=False, prior=False, library=False), dynamic=True)
    with torch.no_grad():
        for s in (5, 9):
            y = torch.randn(2, s, H)
            assert torch.equal(direct(y), c(y))
    text = direct.explain()
    assert "torch torch.cumsum" in text and "matmul FLOPs on Emmy" in text
    assert "rule" in text  # each Emmy group's resolution record: who settled its forks
    (report,) = direct.reports()
    assert report.matmul_flops_on_emmy == report.matmul_flops > 0 and report.sizes
    with pytest.raises(TypeError, match="torch_ops"):
        emmy_core.compile(m, (x,), prior=False, library=False, torch_ops="maybe")


def test_the_direct_api_defaults_to_the_dynamo_path() -> None:
    torch.manual_seed(0)
    m = WithCumsum().eval()
    x = torch.randn(2, 5, H)
    compiled = emmy_core.compile(m, (x,), prior=False, library=False)
    assert isinstance(compiled, emmy_core.CompiledModel) and compiled.torch_ops == "run"
    assert compiled.card.target == "cpu"
    with torch.no_grad():
        for s in (5, 8):
            y = torch.randn(2, s, H)
            torch.testing.assert_close(compiled(y), m(y), rtol=1e-5, atol=1e-5)
    (report,) = compiled.reports()
    assert [f.op for f in report.fell_back] == ["torch.cumsum"] and report.ops_on_emmy >= 3
    assert "torch torch.cumsum" in compiled.explain()
    records = compiled.records()
    assert records and all(r.resolutions and r.sizes for r in records)
    assert json.loads(compiled.explain(as_json=True))["graphs"][0]["fell_back"][0]["op"] == "torch.cumsum"
    # what only the one-graph mode has is a TypeError that says where it lives, never an AttributeError
    for what in (lambda: compiled.one_graph, lambda: compiled.resolve("B=2,S=5"), lambda: compiled.layout({"B": 2}),
                 compiled.follow_weights, lambda: compiled.runner("B=2"), lambda: compiled.prepare("B=2")):
        with pytest.raises(TypeError, match="torch_ops='refuse'"):
            what()
    # a module Dynamo hands no graph for: explain() says torch runs all of it, not an empty string
    assert "Dynamo handed no graph" in emmy_core.compile(nn.Identity(), (x,), prior=False, library=False).explain()


def test_refuse_is_the_strict_opt_in() -> None:
    with pytest.raises(UnsupportedOp) as info:
        emmy_core.compile(WithCumsum(), (torch.randn(2, 5, H),), prior=False, library=False, torch_ops="refuse")
    assert "cumsum" in info.value.op and "torch.cumsum(F.relu(self.a(x)), dim=1)" in info.value.source


def test_strict_evidence_is_only_for_the_strict_one_graph_compile() -> None:
    with pytest.raises(TypeError, match=r"strict_evidence=True applies to torch_ops='refuse'"):
        emmy_core.compile(Block(), (torch.randn(2, 5, H),), prior=False, library=False, strict_evidence=True)
    with pytest.raises(TypeError, match=r"torch_ops= must be 'run' .* or 'refuse'"):
        emmy_core.compile(Block(), (torch.randn(2, 5, H),), prior=False, library=False, torch_ops="strict")


def test_each_direct_compile_is_its_own_dynamo_region_so_many_compiles_of_one_class_stay_on_emmy() -> None:
    """Dynamo's recompile limit counts every compile of one `forward`; past it Dynamo would run plain torch."""
    x = torch.randn(2, 5, H)
    with torch._dynamo.config.patch(recompile_limit=1):  # the second compile of the class would be past it
        for _ in range(2):
            m = WithCumsum().eval()
            compiled = emmy_core.compile(m, (x,), prior=False, library=False)
            (report,) = compiled.reports()
            assert report.ops_on_emmy >= 3
            with torch.no_grad():
                torch.testing.assert_close(compiled(x), m(x), rtol=1e-5, atol=1e-5)


def test_a_group_that_differs_from_torch_runs_as_torch_with_a_note() -> None:
    torch.manual_seed(0)
    m = Block().eval()
    c = torch.compile(m, backend=emmy_backend(defer=False, prior=False, library=False), dynamic=True)
    x = torch.randn(2, 5, H)
    with torch.no_grad():
        c(x)
    assert compile_reports()[-1].ops_on_emmy > 0
    # give the group a reference that computes something else: its next size must fail the check and go back
    state = emmy_core.compiler.backend._GRAPHS[-1]
    group: EmmyGroup = state.live_groups()[0]
    group.torch_sub = Doubled(group.torch_sub)
    y = torch.randn(2, 7, H)
    with torch.no_grad():
        out = c(y)
    assert group.off is not None and "differs from torch" in group.off
    torch.testing.assert_close(out, 2 * m(y))  # the answer is the (doubled) reference's, never Emmy's unchecked one
    report = compile_reports()[-1]
    assert report.ops_on_emmy == 0 and any("differs from torch" in n for n in report.notes)


def test_causal_and_masked_attention_run_as_emmy_matmuls_and_softmax_equal_to_torch() -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 5, 8) for _ in range(3))
    bias = torch.randn(5, 5)
    keep = torch.rand(2, 1, 5, 5) > 0.3  # batched, broadcast over the heads
    keep[..., 0] = True  # no row fully masked (`test_attention_rows` has those)
    before = len(compile_reports())
    with torch.no_grad():
        got = torch.compile(Attention(), backend=emmy_backend(defer=False, prior=False, library=False, attention=True))(q, k, v, bias, keep)
        want = Attention()(q, k, v, bias, keep)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    (report,) = _since(before)
    assert report.matmul_flops == report.matmul_flops_on_emmy == 3 * 4 * (2 * 4 * 5 * 5 * 8)
    assert not report.notes, report.notes  # every group passed the check against torch
    masks = [f for f in report.fell_back if f.op.endswith(("attention_mask", "masked_terms"))]
    assert len(masks) == 3  # the masks are torch's to make, one per attention


def test_grouped_query_heads_are_stacked_as_rows_of_one_product_and_no_key_or_value_head_is_copied() -> None:
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)  # 2 query heads a key head

    bias, keep = torch.randn(5, 5), torch.rand(2, 1, 5, 5) > 0.3  # a mask of every head, and a batched one
    keep[..., 0] = True

    def gqa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    def masked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (F.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=True),
                F.scaled_dot_product_attention(q, k, v, attn_mask=keep, enable_gqa=True))

    with torch.no_grad():
        for g, w in zip(torch.compile(masked, backend=emmy_backend(defer=False, prior=False, library=False, attention=True))(q, k, v), masked(q, k, v),
                        strict=True):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
        assert not compile_reports()[-1].notes
        before = len(compile_reports())
        got = torch.compile(gqa, backend=emmy_backend(defer=False, prior=False, library=False, attention=True))(q, k, v)
    torch.testing.assert_close(got, gqa(q, k, v), rtol=1e-5, atol=1e-5)
    (report,) = _since(before)
    assert not report.notes and not [f for f in report.fell_back if "repeat" in f.op], report.fell_back
    products = [p for g in emmy_core.compiler.backend._GRAPHS[-1].live_groups()
                for p in (kp.program for kp in g.compiled.lowered.kernels) if p.name.startswith("matmul")]
    assert len(products) == 2 and all(p.axis("M").extent == 2 * 5 for p in products)  # r * L rows a key head
    assert report.matmul_flops == report.matmul_flops_on_emmy == 2 * (2 * 2 * 4 * 5 * 5 * 8)  # two products


def test_attention_auto_leaves_decode_attention_to_torchs_kernel_and_rewrites_f32_and_f16_attention_on_a_cpu(
) -> None:
    torch.manual_seed(0)

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    for dtype in (torch.float32, torch.float16):
        q, k, v = (torch.randn(1, 2, 6, 8).to(dtype) for _ in range(3))
        before = len(compile_reports())
        with torch.no_grad():
            got = torch.compile(attend, backend=emmy_backend(defer=False, prior=False, library=False))(q, k, v)  # attention="auto"
        torch.testing.assert_close(got, attend(q, k, v), rtol=2e-3, atol=2e-3)
        (report,) = _since(before)
        assert report.matmul_flops == report.matmul_flops_on_emmy == 2 * (2 * 2 * 6 * 6 * 8), dtype
        assert not [f for f in report.fell_back if "scaled_dot_product_attention" in f.op], report.fell_back
    q, k, v = (torch.randn(1, 2, n, 8).half() for n in (1, 9, 9))  # a decode step: one query, the cache's keys
    before = len(compile_reports())
    with torch.no_grad():
        got = torch.compile(attend, backend=emmy_backend(defer=False, prior=False, library=False))(q, k, v)
    torch.testing.assert_close(got, attend(q, k, v), rtol=2e-3, atol=2e-3)
    (report,) = _since(before)
    assert report.matmul_flops_on_emmy == 0
    assert [f.reason for f in report.fell_back if "scaled_dot_product_attention" in f.op] == [DECODE]
    with pytest.raises(ValueError, match="attention="):
        emmy_backend(defer=False, attention="yes")


def test_products_count_their_flops_whether_their_factors_come_by_position_or_by_keyword() -> None:
    """transformers' Mamba calls `F.conv1d(x, weight=w, ...)`: the count read the weight by position and the
    compile died with an IndexError. `baddbmm`'s inner size is its left factor's, not its bias's."""
    torch.manual_seed(0)
    w = torch.randn(8, 1, 3)

    def conv(x: torch.Tensor) -> torch.Tensor:
        return F.conv1d(x, weight=w, padding=2, groups=8)

    def bmm_plus(bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(bias, batch1=a, batch2=b)

    x = torch.randn(2, 8, 7)
    before = len(compile_reports())
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(conv, backend=emmy_backend(defer=False, prior=False, library=False))(x), conv(x))
    (report,) = _since(before)
    assert report.matmul_flops == 2 * (2 * 8 * 9) * (1 * 3)  # output elements times a group's weight
    bias, a, b = torch.randn(2, 3, 5), torch.randn(2, 3, 11), torch.randn(2, 11, 5)
    before = len(compile_reports())
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(bmm_plus, backend=emmy_backend(defer=False, prior=False, library=False))(bias, a, b),
                                   bmm_plus(bias, a, b), rtol=1e-5, atol=1e-5)
    (report,) = _since(before)
    assert report.matmul_flops == 2 * (2 * 3 * 5) * 11


def test_a_lifted_float_attribute_is_taken_at_its_value_and_a_changed_one_runs_as_torch() -> None:
    torch.manual_seed(0)
    m = Scaled().eval()
    c = torch.compile(m, backend=emmy_backend(defer=False, prior=False, library=False), dynamic=True)
    x = torch.randn(2, 5, H)
    with torch.no_grad():
        torch.testing.assert_close(c(x), m(x), rtol=1e-5, atol=1e-5)
        report = compile_reports()[-1]
        assert report.ops_on_emmy == report.ops and not report.fell_back
        (group,) = emmy_core.compiler.backend._GRAPHS[-1].live_groups()
        assert group.translated.consts and group.torch_calls == 0
        m.scale = 0.25  # Dynamo does not recompile for it: the group sees the new value and lets torch compute
        torch.testing.assert_close(c(x), m(x), rtol=1e-5, atol=1e-5)
        assert group.torch_calls == 1


def test_check_outputs_uses_the_harness_tolerance() -> None:
    want = torch.randn(64, dtype=torch.float32)
    assert check_outputs([want + 1e-7], [want], "f32") is None
    assert "values off" in str(check_outputs([want + 1e-2], [want], "f32"))
    assert check_outputs([want + 1e-3], [want], "f16") is None
    nan = want.clone()
    nan[3] = float("nan")
    assert "not finite" in str(check_outputs([nan], [want], "f32"))


def test_check_outputs_at_once_agrees_with_the_full_comparison() -> None:
    """The quick path (`_close_at_once`) passes exactly what the full comparison in f64 passes: values on either
    side of the tolerance, infinities and NaNs on either side, an empty output, 16-bit and f64 outputs."""
    from emmy_core.bench.reference import RTOL
    from emmy_core.compiler.compare import _close_at_once

    g = torch.Generator().manual_seed(0)
    want = torch.randn(257, generator=g, dtype=torch.float64)
    scale = float(want.pow(2).mean().sqrt())
    edge = RTOL["f32"] * (want.abs() + scale)
    cases = [(want + 0.5 * edge, want, "f32"), (want + 1.5 * edge, want, "f32"), (want.float(), want.float(), "f32"),
             (want.bfloat16(), want.float(), "bf16"), ((want + 1.5 * edge).float(), want.float(), "f32")]
    inf = want.clone()
    inf[5] = float("inf")
    nan = want.clone()
    nan[7] = float("nan")
    cases += [(inf, inf, "f32"), (want, inf, "f32"), (inf, want, "f32"), (torch.empty(0), torch.empty(0), "f32"),
              (nan, want, "f32"), (want, nan, "f32"), (nan, nan, "f32")]
    for got, ref, dtype in cases:
        full = check_outputs([got], [ref], dtype) is None
        assert not _close_at_once(got, ref, RTOL[dtype]) or full  # never passes what the full comparison refuses
    assert _close_at_once(want + 0.5 * edge, want, RTOL["f32"])  # and takes the usual case itself
    assert not _close_at_once(want + 1.5 * edge, want, RTOL["f32"])


def test_the_backend_is_registered_as_the_emmy_entry_point() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    target = meta["project"]["entry-points"]["torch_dynamo_backends"]["emmy"]
    module, _, attr = target.partition(":")
    fn = getattr(__import__(module, fromlist=[attr]), attr)
    if "emmy" not in torch._dynamo.list_backends(exclude_tags=()):  # an install older than the entry point
        torch._dynamo.register_backend(fn, name="emmy")
    m = Block().eval()
    x = torch.randn(1, 3, H)
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(m, backend="emmy")(x), m(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("contiguous", [False, True])
def test_a_transposed_output_is_handed_back_as_torchs_own_strided_view_not_a_copy(contiguous: bool) -> None:
    torch.manual_seed(0)
    m = Heads(contiguous).eval()
    c = torch.compile(m, backend=emmy_backend(defer=False, prior=False, library=False), dynamic=True)
    before = len(emmy_core.compiler.backend._GRAPHS)
    xs = (torch.randn(2, 5, H), torch.randn(1, 7, H))
    with torch.no_grad():
        for x in xs:
            torch.testing.assert_close(c(x), m(x))
        (group,) = emmy_core.compiler.backend._GRAPHS[before].live_groups()
        assert group.off is None and group._runners
        for runner in group._runners.values():
            kinds = [kind for kind, _ in runner.labels]
            if contiguous:  # torch's value is contiguous: a view would be strided unlike it, so the copy stays
                assert "copy" in kinds
                continue
            assert "copy" not in kinds  # torch's transpose is a view: so is Emmy's output, and nothing is copied
            (x,) = [x for x in xs if 4 * x.numel() == runner.layout.input_nbytes]
            (out,) = runner.run([x])
            want = m.v(x).view(*x.shape[:2], 4, H // 4).transpose(1, 2)
            assert out.stride() == want.stride()
            torch.testing.assert_close(out, want)


def test_a_weight_is_packed_once_for_every_size_and_again_when_edited_in_place() -> None:
    torch.manual_seed(0)
    m = Block().eval()
    c = torch.compile(m, backend=emmy_backend(prior=False, library=False, defer=False), dynamic=True)
    before = len(emmy_core.compiler.backend._GRAPHS)
    with torch.no_grad():
        c(torch.randn(2, 3, H))
        (group,) = emmy_core.compiler.backend._GRAPHS[before].live_groups()
        packed = {k: v[1].data_ptr() for k, v in group._packs.items()}
        assert packed  # the three projections' weights, packed into panels
        for s in (5, 8, 13):
            x = torch.randn(2, s, H)
            torch.testing.assert_close(c(x), m(x))
        assert len(group._runners) >= 3  # a runner per size, all reading the same panels
        assert len(group.sizes_seen()) == 4  # every size it ran, each once (what a tune of the module benches)
        assert {k: v[1].data_ptr() for k, v in group._packs.items()} == packed
        m.down.weight.mul_(-1.0)  # an in-place edit: the panels of the old values are dropped and packed again
        x = torch.randn(2, 5, H)
        torch.testing.assert_close(c(x), m(x))
        assert len(group._packs) == len(packed) and set(group._packs) != set(packed)


def test_a_call_where_torch_tracks_gradients_runs_torch_warns_once_and_the_report_counts_it() -> None:
    """Autograd needs torch's own ops, so such a call runs torch (its gradients are right); the user is told
    once, and the report no longer claims Emmy ran it."""
    from emmy_core.compiler import NoGradientsWarning
    from emmy_core.compiler.coverage import render_reports

    torch.manual_seed(0)
    m = Scaled().eval()
    c = torch.compile(m, backend=emmy_backend(defer=False, prior=False, library=False), dynamic=True)
    x = torch.randn(2, 5, H)
    with pytest.warns(NoGradientsWarning, match="torch ran it"):
        y = c(x)
    assert y.grad_fn is not None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per group, not per call
        c(x)
    report = compile_reports()[-1]
    assert report.torch_calls == 2 == report.calls and report.to_json()["torch_calls"] == 2
    assert "torch ran Emmy's groups in 2 of 2 call(s)" in render_reports([report])
    with torch.no_grad():
        torch.testing.assert_close(c(x), m(x), rtol=1e-5, atol=1e-5)
    by_name = {r.name: r for r in compile_reports()}  # grad mode is a guard: Dynamo compiled another graph for it
    assert by_name[report.name].torch_calls == 2 and compile_reports()[-1].torch_calls == 0  # it ran on Emmy
