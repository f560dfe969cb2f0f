"""Fixtures of the store tests: small real kernels, described cards, and a store of each implementation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from emmy_core.ir import kernel_id, parse
from emmy_core.store import CardRow, MeasurementStore, MemoryStore, open_store

ADD_TEXT = """kernel ew_add {
  axis B = dyn(8)
  axis C = 64
  in a: f32[B, C]
  in b: f32[B, C]
  out y: f32[B, C]
  for i in B {
    for j in C {
      y[i, j] = add(a[i, j], b[i, j])
    }
  }
}
"""
MUL_TEXT = ADD_TEXT.replace("ew_add", "ew_mul").replace("add(", "mul(")
SUB_TEXT = ADD_TEXT.replace("ew_add", "ew_sub").replace("add(", "sub(")

ADD = parse(ADD_TEXT)
MUL = parse(MUL_TEXT)
SUB = parse(SUB_TEXT)
ADD_ID, MUL_ID, SUB_ID = kernel_id(ADD), kernel_id(MUL), kernel_id(SUB)

H100 = "NVIDIA H100 80GB HBM3"
H200 = "NVIDIA H200"
CPU = "AMD EPYC AVX-512 x2"
CARDS = [
    CardRow(H100, "cuda", {"sm_count": 132, "memory_gb": 80, "bandwidth_gbs": 3350, "smem_per_block_kb": 227}),
    CardRow(H200, "cuda", {"sm_count": 132, "memory_gb": 141, "bandwidth_gbs": 4800, "smem_per_block_kb": 227}),
    CardRow(CPU, "cpu", {"cores": 2, "memory_gb": 23}),
]
KNOBS_A = {"block": 64, "num_warps": 4}
KNOBS_B = {"block": 128, "num_warps": 8}


def open_fresh(kind: str, path: Path) -> MeasurementStore:
    return MemoryStore() if kind == "memory" else open_store(path, "w")


@pytest.fixture(params=["memory", "duckdb"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MeasurementStore]:
    """An empty store of each implementation, with the test kernels and cards already recorded."""
    s = open_fresh(request.param, tmp_path / "store.db")
    s.record(kernels=[ADD, MUL, SUB], cards=CARDS)
    yield s
    s.close()
