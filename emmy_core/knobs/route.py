"""The library route: a kernel run as torch runs it is one more option of its schedule fork.

Every matrix product Emmy lowers (a matmul-family kernel, its epilogue included; not a split-K
partial, whose pieces only exist because Emmy split the product) can also run as torch's own
ops: oneDNN or MKL on a CPU, cuBLAS on a GPU. That option is an ordinary schedule, with the
knobs `library=torch` and `library_version=<torch's release>`, so it is benched by the same
harness, recorded by the one writer, frozen, exported and settled by the same tiers as Emmy's
own candidates. Its release is part of its identity: a measurement taken with another torch
does not speak for this one, so such an option is refused here (`library_problem`) and the
fork is resolved again.

The library option is the fork's first option (`graph.forks.schedule_fork`): where no
measurement answers, a product runs as torch runs it, which is correct everywhere and never
slower than not compiling; Emmy's kernels earn their place by evidence. Emmy's own pool
(`knobs.candidates`, what the prior ranks and the datasets enumerate) is unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache

from emmy_core.ir.family import MatmulShape
from emmy_core.ir.nodes import Program
from emmy_core.knobs.view import KernelView, view

LIBRARY = "torch"
ROUTE_KNOBS = ("library", "library_version")
Knobs = dict[str, object]


@lru_cache(maxsize=1)
def library_version() -> str:
    """The installed torch's release (its package metadata: no torch import on the light paths)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError:  # a resolve-only machine without torch: no library measured here can run
        return "0"


def library_knobs() -> Knobs:
    """The library option's knobs for the torch installed here."""
    return {"library": LIBRARY, "library_version": library_version()}


def is_library(knobs: Mapping[str, object]) -> bool:
    """Whether a knob assignment is the library route (any release)."""
    return "library" in knobs


def routes(v: KernelView) -> bool:
    """Whether the kernel has a library route: a matrix product that is not a split-K partial."""
    return isinstance(v.shape, MatmulShape) and v.shape.parts is None and v.shape.window is None


def with_library(program: Program, pool: Sequence[Mapping[str, object]]) -> list[dict[str, object]]:
    """A tune's variants of `program`: the library route first where the kernel has one (measured beside Emmy's
    candidates, outside any budget: it is one variant, and the one every other must beat), then `pool`."""
    own = [dict(k) for k in pool]
    if routes(view(program)):
        return [library_knobs(), *own]
    return own


def library_problem(v: KernelView, knobs: Mapping[str, object]) -> str | None:
    """Why a library assignment cannot run this kernel here (None: it can)."""
    if set(knobs) != set(ROUTE_KNOBS):
        extra = sorted(set(knobs) - set(ROUTE_KNOBS)) or sorted(set(ROUTE_KNOBS) - set(knobs))
        return f"the library route takes exactly {', '.join(ROUTE_KNOBS)} (not {extra[0]!r})"
    if not routes(v):
        return f"a {v.family} kernel has no library route (only whole matrix products have one)"
    if knobs["library_version"] != library_version():
        return (f"measured with torch {knobs['library_version']}, and this is torch {library_version()}: "
                "the library's kernel changes with its release")
    return None
