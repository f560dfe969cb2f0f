"""Emmy: a small ML compiler and the data system around its autotuning.

`emmy_core.compile(module, example_inputs, ...)` compiles a model to generated kernels (`emmy_core.compiler`),
by default on the path of `torch.compile(model, backend="emmy")`: a model's graphs run on Emmy kernels where
Emmy lowers them and as torch elsewhere, `.explain()` and `emmy_core.compile_reports()` say how much ran
where (`torch_ops="refuse"`: one graph all on Emmy kernels, or a refusal). `emmy_core.tune_module(module,
example_inputs, ...)` measures the kernels the backend lowers a module to on this machine and records them, so
the next compile's forks are answered by measurement. The compiler is loaded on first
use, so `import emmy_core` stays light; imported before torch, it asks OpenMP's threads to sleep rather than
spin between kernels (`emmy_core.threads`).
"""

from __future__ import annotations

from typing import Any

from emmy_core.threads import apply_wait_policy

apply_wait_policy()  # OpenMP threads that sleep, not spin, between kernels: read once, when torch loads libgomp

_LAZY = ("compile", "compile_reports", "explain", "Compiled", "CompiledModel", "StrictEvidenceError",
         "PriorUnavailableWarning", "TooLarge", "tune_module")


def __getattr__(name: str) -> Any:
    if name == "tune_module":
        from emmy_core.search.module_tune import tune_module

        return tune_module
    if name in _LAZY:
        import emmy_core.compiler as compiler

        return getattr(compiler, name)
    raise AttributeError(f"module 'emmy_core' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
