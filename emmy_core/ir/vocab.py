"""Closed vocabularies of the loop-program IR: data types, operators, reserved words.

Everything a loop program may name comes from these sets or passes the identifier
rule in `names.py`; nothing else can reach generated Triton or C source.
"""

from __future__ import annotations

# data type -> width in bits
DTYPES: dict[str, int] = {
    "f16": 16,
    "bf16": 16,
    "f32": 32,
    "f64": 64,
    "i32": 32,
    "i64": 64,
}
FLOAT_DTYPES = frozenset({"f16", "bf16", "f32", "f64"})
# per float type: the largest finite value and the smallest subnormal a constant of it may take
FLOAT_RANGE: dict[str, tuple[float, float]] = {
    "f16": (65504.0, 2.0**-24), "bf16": ((2 - 2.0**-7) * 2.0**127, 2.0**-133),
    "f32": ((2 - 2.0**-23) * 2.0**127, 2.0**-149), "f64": (1.7976931348623157e308, 5e-324)}


def float_misfit(dtype: str, value: float) -> str | None:
    """Why a float constant cannot be held by `dtype` (past its largest finite value, or a non-zero that rounds
    to zero in it), or None when it can: the text and the kernel must mean the same number."""
    largest, tiniest = FLOAT_RANGE[dtype]
    if abs(value) > largest and abs(value) != float("inf"):
        return f"does not fit {dtype} (largest {largest:g})"
    if value != 0 and abs(value) <= tiniest / 2:
        return f"is zero in {dtype} (smallest {tiniest:g}): write 0.0"
    return None
INT_DTYPES = frozenset({"i32", "i64"})

UNARY_OPS = frozenset(
    {"neg", "exp", "log", "sqrt", "rsqrt", "abs", "tanh", "erf", "sigmoid", "relu", "recip"}
)
BINARY_OPS = frozenset({"add", "sub", "mul", "div", "max", "min", "pow"})
REDUCE_OPS = frozenset({"sum", "max", "min"})
ROLES = ("in", "out")

# Words of the grammar itself; they can never name an axis, buffer or value.
GRAMMAR_WORDS = frozenset(
    {"kernel", "extern", "axis", "dyn", "in", "out", "for", "let", "reduce", "const", "cast", "extent",
     "problem", "space", "inf"}
)


def dtype_bytes(dtype: str) -> int:
    """Width of a data type in bytes."""
    return DTYPES[dtype] // 8
