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
