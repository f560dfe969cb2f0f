"""The cpu backend: C with OpenMP from a loop program and CPU schedule knobs (DESIGN sections 3, 5).

`CBackend().source(program, knobs, setting)` validates the program (nothing read from a
file reaches C unchecked), reads the knobs (`c_schedule.py`: defaults, refusals) and
translates the whole program (`c_emit.py`; the packed matmul in `c_matmul.py` and its
micro-kernel in `c_micro.py`; row kernels that convert and compute once in `c_rows.py`;
expressions and exact constants in `c_expr.py`). `build` compiles that source with the
setting's flags into the on-disk cache and returns a `CBuilt` (`c_build.py`) that runs on
torch CPU tensors, checked per call or prepared once (`CBuilt.prepare`). Every dtype of the
IR is supported: f16 and bf16 as uint16 bits with exact conversions (round to nearest
even), by F16C instructions where the build targets them, else in integer operations.
The instruction set is the compiler's target (`-march=native` at `deploy`): the source
is the same for every CPU, and the build cache keys on the resolved target.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from emmy_core.codegen.backend import BuildError, get_setting
from emmy_core.codegen.c_build import CBuilt, CCompiler
from emmy_core.codegen.c_schedule import schedule_of
from emmy_core.codegen.c_source import kernel_source
from emmy_core.codegen.library import LibraryBuilt, library_build
from emmy_core.ir.check import validate
from emmy_core.ir.nodes import Program
from emmy_core.knobs.route import is_library

if TYPE_CHECKING:
    import torch


class CBackend:
    """Backend for the `cpu` target. `compiles` counts the compiler runs this instance made."""

    target = "cpu"

    def __init__(self, cc: str = "cc") -> None:
        self.compiler = CCompiler(cc)

    @property
    def compiles(self) -> int:
        return self.compiler.compiles

    def source(self, program: Program, knobs: dict[str, object], setting: str) -> str:
        """C source of `program` under `knobs`; IRError for an invalid program, BuildError for bad knobs."""
        get_setting(setting)
        if is_library(knobs):
            raise BuildError(f"{program.name}: the library route runs torch's own kernel; it has no C source")
        validate(program)
        if not isinstance(program, Program):
            raise BuildError(f"the cpu backend builds loop programs, not {type(program).__name__}")
        return kernel_source(program, schedule_of(knobs))

    def build(self, program: Program, knobs: dict[str, object], setting: str) -> CBuilt | LibraryBuilt:
        """A launchable build of `program` (cached on disk); BuildError when the source does not compile. The
        library route (`knobs.route`) builds torch's own kernel for it instead (`codegen.library`)."""
        if is_library(knobs):
            get_setting(setting)
            validate(program)
            return library_build(program, knobs)
        src = self.source(program, knobs, setting)
        flags = get_setting(setting).c_flags
        return CBuilt(program, self.compiler.library(src, flags, program.name))

    @staticmethod
    def timed_launch(built: CBuilt | LibraryBuilt, buffers: Mapping[str, torch.Tensor], sizes: Mapping[str, int]) -> Callable[[], None]:
        """The launch a compiled model makes, for timing: prepared at `sizes` with its weights bound.

        Weights are the inputs whose shape has no dynamic axis (a kernel's activations carry
        the token or batch axis): a matmul's B then is packed once, as a compile packs it.
        """
        static = {b.name for b in built.program.inputs
                  if all(built.program.axis(a).extent is not None for a in b.shape)}
        launch = built.prepare(sizes, {n: buffers[n] for n in static})
        rest = {n: t for n, t in buffers.items() if n not in static}
        return lambda: launch(rest)
