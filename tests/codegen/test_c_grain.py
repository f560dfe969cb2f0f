"""Rule: a parallel region takes no more threads than its run's work has grains (`CPU_GRAIN` innermost
iterations each), at least one and at most the `threads` knob; the team is sized at run time from the
dynamic extents, and any team computes what one thread computes."""

from __future__ import annotations

import re

import pytest
import torch

from emmy_core.codegen.c import CBackend
from emmy_core.codegen.c_emit import CPU_GRAIN, work_c
from emmy_core.ir import Program
from emmy_core.ir.builders import Dim, matmul, rmsnorm

MM = matmul(Dim("T", 8), 128, 128, dtype="f32")
ROW = rmsnorm(256, dtype="f32")


def _work(program: Program, extents: dict[str, int]) -> int:
    """`work_c`'s expression evaluated for these extents (its C is integer arithmetic on n_<axis>)."""
    text = re.sub(r"INT64_C\((\d+)\)", r"\1", work_c(program))
    return int(eval(text, {}, {f"n_{k}": v for k, v in extents.items()}))


def _team(program: Program, extents: dict[str, int], threads: int) -> int:
    return max(1, min(threads, _work(program, extents) // CPU_GRAIN))


def test_a_parallel_region_takes_no_more_threads_than_its_run_has_grains() -> None:
    # a 8x128x128 matmul: 8 * 128 * (128 + 1) iterations (the reduction, the store); one row is under a grain
    assert _work(MM, {"T": 8, "N": 128, "K": 128}) == 8 * 128 * 129
    assert _team(MM, {"T": 1, "N": 128, "K": 128}, 2) == 1
    assert _team(MM, {"T": 8, "N": 128, "K": 128}, 2) == 2  # 2.02 grains: both threads
    assert _team(MM, {"T": 4096, "N": 128, "K": 128}, 2) == 2  # never more than the knob
    assert _team(ROW, {"B": 8, "H": 256}, 2) == 1  # a decode-sized RMSNorm stays on one thread
    src = CBackend().source(MM, {"tile_m": 16, "tile_n": 32, "tile_k": 64, "vec": 8, "unroll": 4, "threads": 2},
                            "deploy")
    clauses = re.findall(r"num_threads\((.*)\)", src)
    assert clauses and all(f">> {CPU_GRAIN.bit_length() - 1})" in c and "n_T" in c and c.endswith(": 2))") for c in clauses)
    assert "num_threads" not in CBackend().source(MM, {"vec": 8, "unroll": 4, "threads": 1}, "deploy")


@pytest.mark.parametrize("rows", [1, 80])  # one grain-poor run on one thread, one rich run on two
def test_any_team_size_computes_what_one_thread_computes(rows: int, tmp_path: pytest.TempPathFactory,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMMY_BUILD_CACHE", str(tmp_path))
    backend = CBackend()
    gen = torch.Generator().manual_seed(rows)
    a, b = torch.randn(rows, 128, generator=gen), torch.randn(128, 128, generator=gen)
    names = [x.name for x in MM.inputs]
    out = MM.outputs[0].name
    results = []
    for threads in (1, 2):
        bufs = {names[0]: a, names[1]: b, out: torch.full((rows, 128), float("nan"))}
        backend.build(MM, {"tile_m": 16, "tile_n": 32, "tile_k": 64, "vec": 8, "unroll": 4, "threads": threads},
                      "rank")(bufs, {"T": rows})
        results.append(bufs[out])
    torch.testing.assert_close(results[0], a.double().matmul(b.double()).float(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(results[1], results[0], rtol=0, atol=0)
