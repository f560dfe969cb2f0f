"""Emmy: a small ML compiler and the data system around its autotuning.

`emmy_core.compile(module, example_inputs, ...)` compiles a model to generated kernels
(`emmy_core.compiler`); `torch.compile(model, backend="emmy")` runs a model's graphs on Emmy kernels where
Emmy lowers them and `emmy_core.compile_reports()` says how much did; the compiler is loaded on first use, so `import emmy_core` stays light.
"""

from __future__ import annotations

from typing import Any

_LAZY = ("compile", "compile_reports", "explain", "Compiled", "StrictEvidenceError", "PriorUnavailableWarning", "TooLarge")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import emmy_core.compiler as compiler

        return getattr(compiler, name)
    raise AttributeError(f"module 'emmy_core' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
