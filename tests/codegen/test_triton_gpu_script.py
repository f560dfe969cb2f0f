"""Rule: the GPU check script (gpu/check_triton.py) runs end to end before it is spent on a GPU.

Its --smoke mode builds the same cases at tiny sizes on CPU under Triton's interpreter,
checks every variant against torch (and runs the eager baselines), and writes the JSON;
here a subset (the splits and the row kernels) runs, and every row must come back ok.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "gpu" / "check_triton.py"


def test_gpu_check_script_smoke_run_is_all_ok(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.spec_from_file_location("check_triton", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "check_triton", module)  # its dataclasses look themselves up there
    spec.loader.exec_module(module)
    out = tmp_path / "results.json"
    rc = module.main([str(out), "--smoke", "--only", "split", "--only", "5x100"])
    result = json.loads(out.read_text())
    assert rc == 0 and result["failed"] == 0 and result["smoke"] is True
    labels = {row["case"] for row in result["rows"]}
    assert any("split:K=8" in lb for lb in labels) and any("split:H=8" in lb for lb in labels)
    assert any(lb.startswith("rmsnorm f16 5x100") for lb in labels) and any("layernorm" in lb for lb in labels)
    assert all(row["status"] == "ok" and row["max_rel_err"] < 1e-2 and "ms" not in row for row in result["rows"])
