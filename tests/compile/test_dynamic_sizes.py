"""Sizes the emmy backend binds however torch writes them: a group reads every symbolic size from an input
that shows it, as a symbol, as a symbol plus a constant (a KV cache's length + 1), or as an expression no
symbol can be solved from (a convolution's output length); and one size written two ways is one axis."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from emmy_core.compiler.backend import GraphReport, compile_reports, emmy_backend

H = 32


@pytest.fixture(autouse=True)
def fresh_dynamo() -> None:
    torch._dynamo.reset()


class CacheStep(nn.Module):
    """A decode step: the new position joined to the cache by torch (a concatenation along the sequence), then a
    projection Emmy runs, whose sizes show the cache's length only as that length + 1."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(H, H)

    def forward(self, past: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.proj(torch.cat([past, x], dim=1)))


class ConvFront(nn.Module):
    """An audio front end (as wav2vec2's): strided convolutions torch runs, then a projection Emmy runs, whose
    length is the convolutions' output length `(s - 4) // 3 + 1`, an expression with no input of `s` in its group."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(1, H, kernel_size=5, stride=3)
        self.proj = nn.Linear(H, H)

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.proj(F.gelu(self.conv(wave[:, None]).transpose(1, 2))))


class Patches(nn.Module):
    """A patch embedding (a strided convolution torch runs), then a projection Emmy runs on the channels-last
    view of its grid and a residual (as ConvNeXt's): torch writes the projection's width `((s//4)**2)//(s//4)`."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, H, kernel_size=4, stride=4)
        self.proj = nn.Linear(H, H)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        y = self.conv(image)
        return F.gelu(self.proj(y.permute(0, 2, 3, 1))).permute(0, 3, 1, 2) + y


def _run_dynamic(module: nn.Module, calls: Iterable[Sequence[torch.Tensor]]) -> list[GraphReport]:
    """Compiles `module` with dynamic sizes, checks it equals eager on every call's arguments, and returns the
    reports of the graphs it compiled."""
    m = module.eval()
    c = torch.compile(m, backend=emmy_backend(defer=False, prior=False, library=False), dynamic=True)
    before = len(compile_reports())
    with torch.no_grad():
        for args in calls:
            torch.testing.assert_close(c(*args), m(*args))
    return compile_reports()[before:]


def test_a_size_a_group_sees_only_as_a_cache_length_plus_one_is_bound_from_it() -> None:
    torch.manual_seed(0)
    reports = _run_dynamic(CacheStep(), ((torch.randn(2, past, H), torch.randn(2, 1, H)) for past in (3, 4, 6, 9)))
    assert reports and all(r.matmul_flops_on_emmy == r.matmul_flops > 0 for r in reports), \
        [(r.fell_back, r.notes) for r in reports]


def test_a_size_a_group_sees_only_as_a_convolutions_output_length_is_read_from_the_input_that_has_it() -> None:
    torch.manual_seed(0)
    reports = _run_dynamic(ConvFront(), ((torch.randn(batch, length),) for batch, length in ((2, 40), (1, 7), (3, 61))))
    assert reports and all(r.matmul_flops_on_emmy > 0 for r in reports), [(r.fell_back, r.notes) for r in reports]
    assert all("torch.linear" not in {f.op for f in r.fell_back} for r in reports), [r.fell_back for r in reports]


def test_one_size_written_two_ways_by_an_exact_floor_division_is_one_axis_and_runs_on_emmy() -> None:
    torch.manual_seed(0)
    reports = _run_dynamic(Patches(), ((torch.randn(batch, 3, side, side),)
                                       for batch, side in ((2, 32), (1, 16), (3, 24))))
    assert reports and all(r.matmul_flops_on_emmy > 0 for r in reports), [(r.fell_back, r.notes) for r in reports]
    assert all(not {"torch.linear", "operator.add"} & {f.op for f in r.fell_back} for r in reports), \
        [r.fell_back for r in reports]


class SquareAttention(nn.Module):
    """Scores and their product with the values, as an attention written out: batched products whose batch axis
    (the batch) and rows (the length) get one symbol when they are equal at the first call."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(H, H)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = self.proj(x).view(*x.shape[:-1], -1, 8).transpose(1, 2)
        return (q @ q.transpose(-1, -2)).softmax(-1) @ q


def test_one_symbol_for_a_products_batch_axis_and_its_rows_names_two_kernel_axes_each_bound_to_it() -> None:
    """Batch equal to length at the first call gave a product over [s, 4, s, 8] two axes of one name, refused
    ("batch axes must be distinct"), so its group fell back to torch: a tiny Llama's linears with it (86% of its
    FLOPs on Emmy)."""
    torch.manual_seed(0)
    reports = _run_dynamic(SquareAttention(), ((torch.randn(n, n, H),) for n in (8, 5, 11)))
    assert reports and all(r.matmul_flops_on_emmy == r.matmul_flops > 0 for r in reports), \
        [(r.fell_back, r.notes) for r in reports]


def test_a_transformers_llama_with_batch_equal_to_length_runs_wholly_on_emmy_under_dynamic_sizes() -> None:
    """Its rotary embedding slices `x[..., : x.shape[-1] // 2]`, which Dynamo computes as `(16*s**2//s**2)//2`
    where batch and length share a symbol: the slice is the number 8, as in a static graph."""
    import transformers as T

    torch.manual_seed(0)
    cfg = T.LlamaConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2)
    model = T.LlamaModel(cfg)

    class Hidden(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.model(input_ids=ids).last_hidden_state

    square = _run_dynamic(Hidden(), ((torch.randint(0, 100, (n, n)),) for n in (8, 5)))
    assert square and all(r.matmul_flops_on_emmy == r.matmul_flops > 0 for r in square), \
        [(r.fell_back, r.notes) for r in square]
    torch._dynamo.reset()
    (oblong,) = _run_dynamic(Hidden(), [(torch.randint(0, 100, (2, 8)),)])

    def left(r: GraphReport) -> list[tuple[str, str]]:  # what torch runs, with the symbols' names taken out
        return sorted((f.op, re.sub(r"\bd\d+\b", "d", f.reason)) for f in r.fell_back)

    assert left(square[0]) == left(oblong)  # the rotary embedding's halves among what Emmy runs, as with two symbols


class RotaryScale(nn.Module):
    """A projection times a rotary table read at the positions, [1, 1, L, D] against [B, H, L, D] (Llama's cos), and
    one plus a learned position row, [1, L, D] against [B, L, D] (GPT-2's position embedding)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, y: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.proj(x) * cos), torch.relu(self.proj(y) + pos)


def test_a_length_of_one_at_the_first_call_keeps_a_rotary_table_and_a_position_row_on_emmy() -> None:
    """Dynamo makes a length of 1 the constant 1 (every decode step has one): an operand [1, 1, 1, D] against
    [B, H, 1, D] was refused ("Emmy broadcasts rows and columns") where [1, 1, L, D] ran on Emmy, so a rotary
    decoder's first graph at length 1 left its rotary products and halves to torch."""
    torch.manual_seed(0)
    calls = [(torch.randn(b, 4, n, 16), torch.randn(1, 1, n, 16), torch.randn(b, n, 16), torch.randn(1, n, 16))
             for b, n in ((2, 1), (3, 1), (2, 5))]
    reports = _run_dynamic(RotaryScale(), calls)
    assert reports and all(not r.fell_back and r.matmul_flops_on_emmy == r.matmul_flops > 0 for r in reports), \
        [r.fell_back for r in reports]
