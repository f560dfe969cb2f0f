"""One map between Emmy's data-type names and torch's (emmy_core.dtypes)."""

from __future__ import annotations

import pytest
import torch

from emmy_core.dtypes import MODEL_DTYPES, TORCH_NAMES, model_dtypes_by_torch, torch_dtype
from emmy_core.ir.vocab import DTYPES


def test_every_ir_data_type_has_one_torch_type() -> None:
    assert set(TORCH_NAMES) == set(DTYPES)
    for name, bits in DTYPES.items():
        assert torch_dtype(name).itemsize * 8 == bits
    assert torch_dtype("bf16") is torch.bfloat16 and torch_dtype("i64") is torch.int64


def test_model_dtypes_map_back_to_their_names() -> None:
    assert set(MODEL_DTYPES) <= set(TORCH_NAMES)
    assert model_dtypes_by_torch() == {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}


def test_an_unknown_data_type_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown data type 'f8'; known: f16, bf16"):
        torch_dtype("f8")
