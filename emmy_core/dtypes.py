"""Emmy's data-type names and the torch types they stand for: the one map between the two.

The IR names data types "f16", "bf16", ...; torch calls them float16, bfloat16, ... Every module that
turns one into the other asks here. torch is imported only when a torch type is asked for, so code
that needs only the names (code generation, the bench's planner) does not load it.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# Emmy's name -> torch's attribute name (torch.float16, ...), for every data type the IR knows.
TORCH_NAMES: dict[str, str] = {
    "f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64", "i32": "int32", "i64": "int64",
}
# The data types a model (and so a model's graph) may run in.
MODEL_DTYPES: tuple[str, ...] = ("f32", "f16", "bf16")


def torch_dtype(name: str) -> torch.dtype:
    """The torch type of Emmy's data type `name`; ValueError naming the known ones for any other."""
    import torch

    if name not in TORCH_NAMES:
        raise ValueError(f"unknown data type {str(name)[:40]!r}; known: {', '.join(TORCH_NAMES)}")
    return getattr(torch, TORCH_NAMES[name])


@cache
def model_dtypes_by_torch() -> dict[torch.dtype, str]:
    """torch type -> Emmy's name, for the model data types only (what a captured graph may hold)."""
    return {torch_dtype(name): name for name in MODEL_DTYPES}
