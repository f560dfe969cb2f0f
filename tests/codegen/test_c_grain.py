"""Rule: a parallel region takes no more threads than its run's work has grains (`CPU_GRAIN` innermost
iterations each), at least one and at most the `threads` knob; the team is sized at run time from the
dynamic extents, and any team computes what one thread computes."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

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
    assert clauses and all(f">> {CPU_GRAIN.bit_length() - 1})" in c and "n_T" in c for c in clauses)
    assert "num_threads" not in CBackend().source(MM, {"vec": 8, "unroll": 4, "threads": 1}, "deploy")


def _clause_team(clause: str, tmp_path: Path, extents: dict[str, int], packs_b: bool) -> int:
    """The team a `num_threads` clause asks for at these extents, computed by the C compiler itself."""
    src = tmp_path / "team.c"
    args = "".join(f"const int64_t n_{k} = atoll(argv[{i + 1}]);" for i, k in enumerate(extents))
    src.write_text("#include <stdint.h>\n#include <stdio.h>\n#include <stdlib.h>\n"
                   "static inline int64_t em_min64(int64_t a, int64_t b) { return a < b ? a : b; }\n"
                   f"int main(int argc, char **argv) {{ {args} void *em_own = argv[{len(extents) + 1}][0] == '1' "
                   f"? argv : 0; (void)argc; printf(\"%d\\n\", {clause}); return 0; }}\n")
    exe = tmp_path / "team"
    subprocess.run(["cc", "-O0", "-o", str(exe), str(src)], check=True, capture_output=True)
    out = subprocess.run([str(exe), *map(str, extents.values()), "1" if packs_b else "0"], check=True,
                         capture_output=True, text=True)
    return int(out.stdout)


@pytest.mark.parametrize("par_axis", ["m", "n"])
def test_a_matmul_team_is_no_larger_than_its_blocks_unless_it_packs_b(par_axis: str, tmp_path: Path) -> None:
    """Rule: a matmul's parallel region takes no more threads than it has blocks to share (batch x row or column
    blocks), unless the team first packs B together; at decode sizes (T under one row block) a team of the
    `threads` knob had one thread computing and the other waiting at the join."""
    knobs = {"tile_m": 16, "tile_n": 32, "tile_k": 64, "vec": 8, "unroll": 4, "threads": 2, "par_axis": par_axis}
    src = CBackend().source(MM, knobs, "deploy")
    (clause,) = [c for c in re.findall(r"#pragma omp parallel num_threads\((.*)\)", src) if "em_own" in c]
    size = {"T": 8, "N": 128, "K": 128}  # 2.02 grains; one block of 16 rows, four of 32 columns
    assert _clause_team(clause, tmp_path, size, packs_b=False) == (1 if par_axis == "m" else 2)
    assert _clause_team(clause, tmp_path, size, packs_b=True) == 2  # the team packs B, then shares what blocks there are
    assert _clause_team(clause, tmp_path, {"T": 64, "N": 128, "K": 128}, packs_b=False) == 2
    assert _clause_team(clause, tmp_path, {"T": 1, "N": 128, "K": 128}, packs_b=True) == 1  # under a grain


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
