"""No super-linear work in the parser or any importer: each family of inputs, eight times larger, costs
less than 24 times more (work counted in executed Python lines and calls, never timed: see `scaling`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emmy_core.exchange.importer import import_into
from emmy_core.ir import parse, render
from emmy_core.ir.builders import rmsnorm
from emmy_core.store import MemoryStore
from tests.faults.corpus import kt_cache
from tests.faults.scaling import FACTOR, LIMIT, growth


def program_text(stores: int) -> str:
    head = "kernel big {\n  axis B = dyn(8)\n  axis H = 4096\n  in x: f32[B, H]\n  in w: f32[H]\n"
    outs = "".join(f"  out y{i}: f32[B, H]\n" for i in range(stores))
    body = "".join(f"      y{i}[b, h] = add(mul(x[b, h], w[h]), exp(neg(const(f32, {i}.5))))\n" for i in range(stores))
    return head + outs + "  for b in B {\n    for h in H {\n" + body + "    }\n  }\n}\n"


def test_the_loop_program_parser_is_linear() -> None:
    ratio = growth(program_text, parse, 60)
    assert ratio < LIMIT, f"{FACTOR}x the statements took {ratio:.1f}x the work"


def _freeze_doc(rows: int, kernels: int = 1, duplicate: bool = False) -> dict:
    card = {"arch": "", "name": "NVIDIA H200", "numbers": {}, "target": "cuda", "tensor_cores": []}
    ks = []
    for k in range(kernels):
        program = rmsnorm(64 + k, dtype="f32")
        ks.append({"c_name": program.name, "goldens": [], "program": render(program), "rows": [
            {"knobs": {"block": 64}, "median_us": 1.0 + i, "samples": 3, "setting": "deploy", "sizes": f"B={i + 1}",
             "source": "tune", "status": "ok"} for i in range(rows)]})
    if duplicate:
        ks[0]["rows"].append(dict(ks[0]["rows"][0]))
    return {"format": "emmy-freeze", "version": 1, "card": card, "decisions": [], "kernels": ks, "knob_vocab": 1}


def _writer(tmp_path: Path, name: str, make_doc):  # type: ignore[no-untyped-def]
    def make(n: int) -> Path:
        path = tmp_path / f"{name}-{n}.json"
        path.write_text(json.dumps(make_doc(n)))
        return path
    return make


def _import(path: Path) -> None:
    import_into(MemoryStore(), [path])  # whole or refused: either way, in linear time


def _kt(n: int) -> dict:
    doc = kt_cache()
    doc["tune_params"] = {"block_size_x": list(range(1, n + 1))}
    doc["cache"] = {str(i): {"block_size_x": i, "time": 1.0, "times": [1.0, 1.0]} for i in range(1, n + 1)}
    return doc


@pytest.mark.parametrize(("family", "make_doc", "n"), [
    ("rows", lambda n: _freeze_doc(n), 300),
    ("kernels", lambda n: _freeze_doc(2, kernels=n), 8),
    ("repeated-key", lambda n: _freeze_doc(n, duplicate=True), 300),
    ("kerneltuner-entries", _kt, 300),
    ("long-string", lambda n: {**_freeze_doc(1), "comment": "x" * (20_000 * n)}, 1),
])
def test_every_importer_is_linear(tmp_path: Path, family: str, make_doc, n: int) -> None:  # type: ignore[no-untyped-def]
    ratio = growth(_writer(tmp_path, family, make_doc), _import, n)
    assert ratio < LIMIT, f"{family}: {FACTOR}x the input took {ratio:.1f}x the work"


def test_the_measure_tells_quadratic_work_from_linear() -> None:
    """The guard of the tests above can fail: quadratic work, eight times larger, costs ~64 times more."""
    def quadratic(n: int) -> int:
        return sum(1 for i in range(n) for j in range(n) if i == j)

    assert growth(lambda n: n, quadratic, 150) > LIMIT
    assert growth(lambda n: n, lambda n: sum(range(n * 2000)), 150) < LIMIT
