"""Sizes of dynamic axes: the canonical `B=8,S=512` text used in measurement keys."""

from __future__ import annotations

import re

from emmy_core.ir.errors import IRError
from emmy_core.ir.names import name_problem
from emmy_core.ir.nodes import Program

_ITEM = re.compile(r"([A-Za-z_][A-Za-z0-9_]{0,63})=([0-9]+)\Z")  # ASCII digits only (int() takes any)
_NEGATIVE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}=-[0-9]+\Z")
MAX_SIZE = 2**31 - 1


def parse_sizes(text: str) -> dict[str, int]:
    """Strictly reads `B=8,S=512` (empty text: no dynamic axes)."""
    if not isinstance(text, str):
        raise IRError(f"sizes must be text, got {type(text).__name__}")
    out: dict[str, int] = {}
    if text == "":
        return out
    for item in text.split(","):
        m = _ITEM.match(item.strip())
        if m is None:
            if _NEGATIVE.match(item.strip()):
                raise IRError(f"size {item.strip()[:40]!r}: sizes must be positive whole numbers (1..{MAX_SIZE})")
            raise IRError(f"size {item[:40]!r} is not NAME=INT")
        name, digits = m.group(1), m.group(2)
        if name_problem(name) is not None:
            raise IRError(f"size name {name!r}: {name_problem(name)}")
        if name in out:
            raise IRError(f"size {name!r} given twice")
        value = int(digits) if len(digits.lstrip("0")) <= len(str(MAX_SIZE)) else MAX_SIZE + 1
        if not 1 <= value <= MAX_SIZE:
            shown = digits if len(digits) <= 20 else digits[:20] + "..."
            raise IRError(f"size {name}={shown} out of 1..{MAX_SIZE}")
        out[name] = value
    return out


def format_sizes(sizes: dict[str, int]) -> str:
    """Canonical text of sizes: sorted by name, no spaces."""
    return ",".join(f"{k}={sizes[k]}" for k in sorted(sizes))


def size_bucket(sizes: dict[str, int]) -> tuple[tuple[str, int], ...]:
    """The bucket of sizes a size falls in: each size rounded up to a power of two (a prompt of 33 to 64 tokens
    shares the bucket of 64). What was settled at one size of a bucket serves the others (`ModelResolver`)."""
    return tuple((k, 1 << max(0, int(sizes[k]) - 1).bit_length()) for k in sorted(sizes))


def resolve_sizes(program: Program, sizes: dict[str, int] | None = None) -> dict[str, int]:
    """The size of every dynamic axis of `program`: given, else its expected size. Unknown names refused."""
    sizes = dict(sizes or {})
    dyn = {a.name: a for a in program.dynamic_axes}
    extra = sorted(set(sizes) - set(dyn))
    if extra:
        raise IRError(f"sizes name axes that are not dynamic axes of {program.name}: {', '.join(extra)}")
    return {name: sizes.get(name, ax.hint) for name, ax in dyn.items()}  # type: ignore[misc]


def extents(program: Program, sizes: dict[str, int] | None = None) -> dict[str, int]:
    """Concrete extent of every axis at the given sizes."""
    dyn = resolve_sizes(program, sizes)
    return {a.name: (a.extent if a.extent is not None else dyn[a.name]) for a in program.axes}
