"""The resolution record as a person reads it: fitted to 120 columns, long cells wrapped (never cut), and a
kernel's sizes named by the model's axes (a model at B=1,S=128 runs its row kernels at B·S=128, not "B=128")."""

from __future__ import annotations

from pathlib import Path

import torch

from emmy_core.compiler import explain
from emmy_core.evidence.render import WIDTH, model_sizes, table_text
from emmy_core.graph.models import build_model

LONG = "matmul_f16_Tdyn_N1024_K256_bt_bias_gelu_and_a_very_long_epilogue_name_that_must_not_be_cut"


def test_a_table_fits_120_columns_by_wrapping_cells_not_cutting_them() -> None:
    text = table_text(["kernel", "choice"], [[LONG, "tile_m=128," * 12]])
    assert max(len(line) for line in text.splitlines()) <= WIDTH
    assert LONG in "".join(line.split("  ")[0].strip() for line in text.splitlines()[1:])  # all there, wrapped
    assert "…" not in text


def test_sizes_are_named_by_the_models_axes() -> None:
    assert model_sizes("B=128", {"B": "B·S"}) == "B·S=128"
    assert model_sizes("B=1,S=128", {"B": "B", "S": "S"}) == "B=1,S=128"
    assert model_sizes("", {"B": "B·S"}) == "-"


def test_explain_of_a_model_fits_120_columns_and_names_kernel_sizes_by_the_models_axes(tmp_path: Path) -> None:
    module, inputs = build_model("mlp", torch.float32)
    compiled = explain(module, inputs({"B": 1, "S": 1}), {"B": 1, "S": 128}, tuning_db=tmp_path / "none.db",
                       prior=False)
    text = compiled.explain()
    assert max(len(line) for line in text.splitlines()) <= WIDTH
    assert "B·S=128" in text and " B=128 " not in text


def test_at_80_columns_every_word_stays_whole_and_the_knobs_get_their_own_line(tmp_path: Path) -> None:
    """Issue 46: a narrow terminal had knobs broken mid-token ('tile_n=25 / 6')."""
    module, inputs = build_model("mlp", torch.float32)
    compiled = explain(module, inputs({"B": 1, "S": 1}), {"B": 8, "S": 128}, tuning_db=tmp_path / "none.db",
                       prior=False)
    text = compiled.explain(width=80)
    assert max(len(line) for line in text.splitlines()) <= 80
    record_kernels = {r.kernel for r in compiled.record.resolutions}
    assert all(any(line.startswith(k + " ") for line in text.splitlines()) for k in record_kernels)  # whole names
    choices: list[str] = []
    inside = False
    for line in text.splitlines():  # a long choice goes on between commas, on lines indented past its label
        if line.strip().startswith("choice: "):
            choices.append(line.strip()[len("choice: "):])
            inside = True
        elif inside and line.startswith(" " * 6):
            choices[-1] += " " + line.strip()
        else:
            inside = False
    assert len(choices) == len(compiled.record.resolutions)
    labels = {", ".join(p.strip() for p in r.label.split(",")) for r in compiled.record.resolutions}
    assert set(choices) <= labels  # each on its own line, whole
