"""`emmy_core.compile`: a model compiled to generated kernels, every fork settled by evidence.

`compile(module, example_inputs, *, card="local", setting="deploy", strict_evidence=False, tuning_db=None,
freezes=None, prior=None, torch_ops="run")` (`api.py`) by default goes through the emmy Dynamo backend and
returns `graphs.py`'s `CompiledModel` (torch runs what Emmy does not lower); `torch_ops="refuse"` is its
one-graph mode, holding `compiled.py`'s `Compiled` (or refusing an op Emmy does not lower);
`explain(...)` resolves one graph without building. `layout.py` lays out one size, `runner.py` runs it, `build.py`
builds kernels, `launch.py` is the one place a kernel is launched, `memory.py` refuses what does not fit;
`backend.py` is the `emmy` Dynamo backend (`torch.compile(model, backend="emmy")`) and `compile_reports()`
its coverage.
"""

from emmy_core.compiler.api import compile, explain
from emmy_core.compiler.backend import compile_reports
from emmy_core.compiler.compiled import Compiled, NoGradientsWarning
from emmy_core.compiler.graphs import CompiledModel
from emmy_core.compiler.memory import TooLarge
from emmy_core.evidence.context import PriorUnavailableWarning
from emmy_core.evidence.resolution import StrictEvidenceError

__all__ = ["Compiled", "CompiledModel", "NoGradientsWarning", "PriorUnavailableWarning", "StrictEvidenceError",
           "TooLarge", "compile", "compile_reports", "explain"]
