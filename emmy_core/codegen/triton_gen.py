"""The cuda backend: loop program + schedule knobs -> Triton source, and a launchable build.

`TritonBackend().source(program, knobs, setting)` validates the program (nothing from an
unchecked program reaches the source), recognises its family (`emmy_core.ir.family.classify`),
resolves the knobs for that family and writes one `@triton.jit` kernel through the templates.
`build(...)` writes the source into the build cache (named by its sha256, written through a
temporary file and a rename), imports it, and returns a `TritonBuilt` that launches it on
torch tensors: the tensors' device decides where it runs (CPU tensors need Triton's
interpreter, `TRITON_INTERPRET=1` set before this module's kernels are imported).

Knobs by family (anything else is refused with `BuildError`, naming the knob):
matmul: block_m, block_n, block_k, group_m, acc (f32, or f16 when both operands are f16),
mma ("none" computes the product without tensor cores, as an IEEE FMA dot in f32; any
instruction name asks for tensor cores and Triton picks the card's instruction; a wgmma
name needs num_warps a multiple of 4 and block_m >= 64), num_warps, num_stages;
row and elementwise: block, num_warps, num_stages.

Launch limits (LaunchError, never a wrong answer): kernels index in int32, so no buffer and
no grid's last block may reach 2^31 elements; batch (and split-K parts) run on grid axis 1,
at most 65535; under the interpreter a kernel that computes on bf16 values is refused (the
interpreter does bf16 arithmetic on the raw bits). A built kernel keeps the checked launch of
its last arguments: calling it again with the very same tensors skips the checks (timing loops).
`compile_for` compiles ahead of time for a named CUDA architecture, no GPU needed.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from emmy_core.codegen.backend import BuildError, LaunchError, get_setting
from emmy_core.codegen.library import LibraryBuilt, library_build
from emmy_core.codegen.triton_expr import Writer, ext_name, kernel_fn_name
from emmy_core.codegen.triton_templates import (
    LaunchPlan,
    MatmulKnobs,
    TemplateError,
    lanes,
    lanes_fit,
    matmul,
    row,
)
from emmy_core.dtypes import TORCH_NAMES
from emmy_core.ir import Program, kernel_id, validate
from emmy_core.ir.family import ElementwiseShape, MatmulShape, RowShape, classify
from emmy_core.ir.sizes import extents
from emmy_core.knobs.route import is_library
from emmy_core.knobs.vocab import SCHEDULE_KNOBS, knobs_problem

if TYPE_CHECKING:
    import torch

GENERATOR_VERSION = 1  # printed into every source: a change of the generator changes every cache key
MAX_ELEMENTS = 2**31 - 1  # kernels index in int32
MAX_GRID_Y = 65535
MAX_TILE = 1 << 20  # Triton's largest tensor
MATMUL_KNOBS = ("block_m", "block_n", "block_k", "group_m", "acc", "mma", "num_warps", "num_stages")
ROW_KNOBS = ("block", "num_warps", "num_stages")
AOT_TYPES = {"f16": "fp16", "bf16": "bf16", "f32": "fp32", "f64": "fp64", "i32": "i32", "i64": "i64"}
DEFAULTS: dict[str, object] = {
    "block_m": 64, "block_n": 64, "block_k": 32, "group_m": 8, "num_warps": 4, "num_stages": 3, "block": 1024,
}


def build_dir() -> Path:
    """Where generated Triton sources live: $EMMY_BUILD_CACHE/triton, else ~/.cache/emmy/build/triton."""
    root = os.environ.get("EMMY_BUILD_CACHE")
    base = Path(root) if root else Path.home() / ".cache" / "emmy" / "build"
    return base / "triton"


@dataclass(frozen=True)
class Generated:
    source: str
    plan: LaunchPlan
    function: str  # name of the kernel function in the source


def _knob(knobs: dict[str, object], name: str) -> object:
    return knobs.get(name, DEFAULTS.get(name))


def _check_knobs(knobs: dict[str, object], allowed: tuple[str, ...], family: str) -> None:
    if not isinstance(knobs, dict):
        raise BuildError(f"knobs must be a dict, not {type(knobs).__name__}")
    problem = knobs_problem(knobs)
    if problem is not None:
        raise BuildError(f"knobs refused: {problem}")
    for name in sorted(knobs):
        spec = SCHEDULE_KNOBS.get(name)
        if spec is None or spec.target != "cuda":
            raise BuildError(f"knob {name!r} is not a cuda schedule knob")
        if name not in allowed:
            raise BuildError(f"knob {name!r} has no meaning for a {family} kernel (takes {', '.join(allowed)})")


def _matmul_knobs(program: Program, shape: MatmulShape, knobs: dict[str, object]) -> MatmulKnobs:
    _check_knobs(knobs, MATMUL_KNOBS, "matmul")
    bm, bn, bk = (int(_knob(knobs, n)) for n in ("block_m", "block_n", "block_k"))  # type: ignore[call-overload]
    warps, stages, group = (int(_knob(knobs, n)) for n in ("num_warps", "num_stages", "group_m"))  # type: ignore[call-overload]
    a_dt, b_dt = program.buffer(shape.a).dtype, program.buffer(shape.b).dtype
    if shape.acc_dtype not in ("f16", "bf16", "f32", "f64"):
        raise BuildError(f"no tl.dot template accumulates in {shape.acc_dtype}")
    acc = str(knobs.get("acc", "f32" if shape.acc_dtype in ("f16", "bf16") else shape.acc_dtype))
    if acc == "f16" and not (a_dt == b_dt == "f16"):
        raise BuildError(f"acc=f16 needs f16 operands; this kernel multiplies {a_dt} by {b_dt}")
    if shape.acc_dtype == "f64" and acc != "f64":
        raise BuildError("a kernel that accumulates in f64 takes no acc knob")
    mma = str(knobs.get("mma", "auto"))
    if mma.startswith("wgmma") and (warps % 4 != 0 or bm < 64):
        raise BuildError(f"mma={mma} needs num_warps a multiple of 4 and block_m >= 64 (got {warps}, {bm})")
    for what, size in (("a tile", bm * bk), ("b tile", bk * bn), ("the accumulator", bm * bn)):
        if size > MAX_TILE:
            raise BuildError(f"{what} of {size} elements is larger than Triton's {MAX_TILE}")
    return MatmulKnobs(bm, bn, bk, group, acc, mma != "none", warps, stages)


def _row_knobs(knobs: dict[str, object], family: str) -> tuple[int, int, int]:
    _check_knobs(knobs, ROW_KNOBS, family)
    return int(_knob(knobs, "block")), int(_knob(knobs, "num_warps")), int(_knob(knobs, "num_stages"))  # type: ignore[call-overload]


def generate(program: Program, knobs: dict[str, object], check_types: bool = False) -> Generated:
    """Source and launch plan of `program` under `knobs`; IRError for an invalid program, BuildError else.

    `check_types` adds a static assert of the IR data type after every value (a test aid: Triton
    promotes some half-precision results to f32, and the IR's types must hold throughout).
    """
    validate(program)
    if not isinstance(program, Program):
        raise BuildError(f"{getattr(program, 'name', '?')} is an extern kernel: built by its own tuner, not here")
    try:
        shape = classify(program)
    except ValueError as exc:
        raise BuildError(f"no Triton template: {exc}") from None
    w = Writer(program, check_types)
    try:
        if isinstance(shape, MatmulShape):
            plan = matmul(program, shape, _matmul_knobs(program, shape, knobs), w)
        elif isinstance(shape, RowShape):
            block, warps, stages = _row_knobs(knobs, "row")
            loops = list(zip(shape.rows_vars, shape.rows, strict=True))
            if shape.row_var is None and lanes_fit(program, shape.reductions):
                plan = lanes(program, loops, shape.body, block, warps, stages, w, template="row_lanes")
            else:
                plan = row(program, loops, shape.body, block, warps, stages, w)
        elif isinstance(shape, ElementwiseShape):
            block, warps, stages = _row_knobs(knobs, "elementwise")
            loops = list(zip(shape.vars, shape.axes, strict=True))
            plan = lanes(program, loops, shape.body, block, warps, stages, w, template="elementwise")
        else:
            raise BuildError(f"kernel {program.name}: no Triton template for family {shape.family}")
    except TemplateError as exc:
        raise BuildError(f"kernel {program.name}: {exc}") from None
    fn = kernel_fn_name(program.name)
    params = [f"p_{b.name}" for b in program.buffers] + [ext_name(a.name) for a in program.dynamic_axes]
    knob_text = ", ".join(f"{k}={knobs[k]}" for k in sorted(knobs))
    head = [
        f"# Generated by emmy_core.codegen.triton_gen v{GENERATOR_VERSION}: kernel {kernel_id(program)}",
        f"# template {plan.template}; knobs: {knob_text or 'defaults'}; "
        f"num_warps={plan.num_warps} num_stages={plan.num_stages}",
        "import triton",
        "import triton.language as tl",
        "",
        "",
        "@triton.jit",
        f"def {fn}({', '.join(params)}):",
    ]
    return Generated("\n".join(head + w.lines) + "\n", plan, fn)


# ---- the build cache --------------------------------------------------------------------------------

_LOADED: dict[tuple[str, bool], ModuleType] = {}


def write_source(source: str) -> Path:
    """Writes `source` to the cache as <sha256>.py (temp file + rename); an existing good copy is kept."""
    digest = hashlib.sha256(source.encode("utf-8")).hexdigest()
    folder = build_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"emmy_{digest}.py"
    if path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == digest:
        return path
    fd, tmp = tempfile.mkstemp(prefix=".tmp_", suffix=".py", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(source)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def interpreting() -> bool:
    """Whether Triton's interpreter defines kernels now (triton.knobs where it exists, else the env)."""
    import triton

    knobs = getattr(triton, "knobs", None)
    if knobs is not None:
        return bool(knobs.runtime.interpret)
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def load_module(path: Path) -> ModuleType:
    """Imports a cached source file (after checking it still matches its digest)."""
    mode = interpreting()
    key = (str(path), mode)
    if key in _LOADED:
        return _LOADED[key]
    digest = path.stem.removeprefix("emmy_")
    if hashlib.sha256(path.read_bytes()).hexdigest() != digest:
        raise BuildError(f"cached source {path.name} does not match its digest; refusing to import it")
    name = f"emmy_triton_{digest[:24]}_{'i' if mode else 'c'}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise BuildError(f"cannot import {path.name}")
    module = importlib.util.module_from_spec(spec)
    try:
        sys.modules[name] = module
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise BuildError(f"generated source {path.name} does not load: {exc}") from exc
    _LOADED[key] = module
    return module


# ---- launching -------------------------------------------------------------------------------------


class TritonBuilt:
    """A built kernel: call it with torch tensors by buffer name and the dynamic sizes; outputs in place."""

    def __init__(self, program: Program, generated: Generated, path: Path, module: ModuleType) -> None:
        self.program = program
        self.generated = generated
        self.path = path
        self.kernel = getattr(module, generated.function)
        self._last: tuple[object, Callable[[], None]] | None = None  # (arguments key, prepared launch)

    def grid(self, ext: dict[str, int]) -> tuple[int, ...]:
        """Programs per grid dimension at these extents; LaunchError where int32 indices would overflow."""
        out = []
        for factors in self.generated.plan.grid:
            n = 1
            for axes, div in factors:
                total = 1
                for a in axes:
                    total *= ext[a]
                blocks = -(-total // div)
                if blocks * div > MAX_ELEMENTS:  # the last block's indices must fit in int32 too
                    raise LaunchError(f"{self.program.name}: {'*'.join(axes)} = {total} overflows int32 indices")
                n *= blocks
            out.append(n)
        return tuple(out)

    def check(self, buffers: dict[str, torch.Tensor], sizes: dict[str, int]) -> tuple[list[object], dict[str, int]]:
        import torch

        try:
            ext = extents(self.program, sizes)
        except ValueError as exc:
            raise LaunchError(f"{self.program.name}: {exc}") from None
        missing = sorted(set(b.name for b in self.program.buffers) - set(buffers))
        extra = sorted(set(buffers) - set(b.name for b in self.program.buffers))
        if missing or extra:
            raise LaunchError(f"{self.program.name}: buffers missing {missing}, unknown {extra}")
        devices = {t.device for t in buffers.values() if isinstance(t, torch.Tensor)}
        if len(devices) != 1:
            raise LaunchError(f"{self.program.name}: tensors must all be torch tensors on one device, got {devices}")
        device = next(iter(devices))
        if device.type == "cpu" and not interpreting():
            raise LaunchError("CPU tensors run only under Triton's interpreter (TRITON_INTERPRET=1)")
        if device.type == "cuda" and device.index not in (None, torch.cuda.current_device()):
            raise LaunchError(f"tensors are on {device} but the current device is cuda:{torch.cuda.current_device()}")
        args: list[object] = []
        for b in self.program.buffers:
            t = buffers[b.name]
            want = tuple(ext[a] for a in b.shape)
            if tuple(t.shape) != want or str(t.dtype) != f"torch.{TORCH_NAMES[b.dtype]}":
                raise LaunchError(f"{self.program.name}: buffer {b.name!r} must be {b.dtype}{list(want)}, "
                                  f"got {str(t.dtype).removeprefix('torch.')}{list(t.shape)}")
            if not t.is_contiguous():
                raise LaunchError(f"{self.program.name}: buffer {b.name!r} must be contiguous")
            if t.numel() > MAX_ELEMENTS:
                raise LaunchError(f"{self.program.name}: buffer {b.name!r} has over {MAX_ELEMENTS} elements")
            args.append(t)
        args.extend(ext[a.name] for a in self.program.dynamic_axes)
        return args, ext

    def prepare(self, buffers: dict[str, torch.Tensor], sizes: dict[str, int]) -> Callable[[], None]:
        """Checks the arguments once and returns a launch with nothing left to check (for timing loops)."""
        from triton.compiler.errors import CompilationError
        from triton.runtime.errors import InterpreterError

        args, ext = self.check(buffers, sizes)
        if self.generated.plan.bf16_math and interpreting():
            raise LaunchError(f"{self.program.name} computes on bf16 values, which Triton's interpreter does on "
                              "their raw bits; it runs on a GPU only")
        grid = self.grid(ext)
        if any(g < 1 for g in grid) or (len(grid) > 1 and grid[1] > MAX_GRID_Y) or grid[0] > MAX_ELEMENTS:
            raise LaunchError(f"{self.program.name}: grid {grid} is outside what a launch takes")
        plan = self.generated.plan
        launch = self.kernel[grid]
        name = self.program.name

        def run() -> None:
            try:
                launch(*args, num_warps=plan.num_warps, num_stages=plan.num_stages)
            except (CompilationError, InterpreterError) as exc:
                raise BuildError(f"{name}: {type(exc).__name__}: {exc}"[:2000]) from exc
            except Exception as exc:
                raise LaunchError(f"{name}: {type(exc).__name__}: {exc}"[:2000]) from exc

        return run

    def __call__(self, buffers: dict[str, torch.Tensor], sizes: dict[str, int]) -> None:
        """Launches on `buffers`; the checked launch is kept for the next call with the very same arguments."""
        try:
            key = (tuple((n, t.data_ptr(), t.shape, t.stride(), t.dtype, t.device) for n, t in buffers.items()),
                   tuple(sizes.items()))
        except AttributeError:
            key = None  # not tensors: prepare() says what is wrong
        if key is None or self._last is None or self._last[0] != key:
            run = self.prepare(buffers, sizes)
            self._last = (key, run) if key is not None else None
        else:
            run = self._last[1]
        run()


class TritonBackend:
    """Backend for target `cuda`: Triton kernels (run by the interpreter on CPU tensors).

    `check_types=True` builds kernels that assert the IR's data type of every value (tests).
    """

    target = "cuda"

    def __init__(self, check_types: bool = False) -> None:
        self.check_types = check_types

    def source(self, program: Program, knobs: dict[str, object], setting: str) -> str:
        get_setting(setting)  # the setting changes timing, not the kernel: one source for both
        if is_library(knobs):
            raise BuildError(f"{program.name}: the library route runs torch's own kernel; it has no Triton source")
        return generate(program, knobs, self.check_types).source

    def build(self, program: Program, knobs: dict[str, object], setting: str) -> TritonBuilt | LibraryBuilt:
        """A launchable build (Triton), or torch's own kernel for the library route (cuBLAS; `codegen.library`)."""
        get_setting(setting)
        if is_library(knobs):
            return library_build(program, knobs)
        generated = generate(program, knobs, self.check_types)
        path = write_source(generated.source)
        return TritonBuilt(program, generated, path, load_module(path))


def compile_for(program: Program, knobs: dict[str, object], arch: int = 90, warp_size: int = 32,
                max_shared_bytes: int | None = None, unit_sizes: bool = False,
                timeout_s: float = 300.0) -> dict[str, int]:
    """Compiles the kernel ahead of time for a CUDA architecture, no GPU needed; returns facts of the result.

    Facts: `bytes_<stage>` (size of each stage's output: ttir, ttgir, llir, ptx, cubin), `wgmma`
    and `mma_sync` (tensor-core instructions in the PTX), `shared_bytes` (shared memory taken; over
    `max_shared_bytes`, the card's limit per block, it is a BuildError, as the launch would fail).

    Runs in a fresh interpreter without TRITON_INTERPRET (Triton's own library kernels are
    defined for one mode per process). Dynamic extents compile as 32-bit integers, buffers as
    pointers to their data type; with `unit_sizes`, every dynamic extent is 1 and compiled as a
    constant, as Triton's launcher specialises an argument equal to 1 (decode: one token).
    BuildError carries Triton's message when the source does not compile for that card.
    """
    import json
    import subprocess

    generated = generate(program, knobs)
    path = write_source(generated.source)
    signature = {f"p_{b.name}": "*" + AOT_TYPES[b.dtype] for b in program.buffers}
    signature.update({ext_name(a.name): "constexpr" if unit_sizes else "i32" for a in program.dynamic_axes})
    constants = {ext_name(a.name): 1 for a in program.dynamic_axes} if unit_sizes else {}
    job = {"path": str(path), "function": generated.function, "signature": signature, "constants": constants,
           "arch": arch,
           "warp_size": warp_size, "num_warps": generated.plan.num_warps, "num_stages": generated.plan.num_stages}
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    try:
        proc = subprocess.run([sys.executable, "-m", "emmy_core.codegen.triton_aot", json.dumps(job)], env=env,
                              capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise BuildError(f"{program.name}: compiling for sm_{arch} took over {timeout_s:.0f} s") from None
    if proc.returncode != 0:
        raise BuildError(f"{program.name} does not compile for sm_{arch}: {proc.stderr[-2000:]}")
    facts = {str(k): int(v) for k, v in json.loads(proc.stdout.strip().splitlines()[-1]).items()}
    if max_shared_bytes is not None and facts["shared_bytes"] > max_shared_bytes:
        raise BuildError(f"{program.name} needs {facts['shared_bytes']} bytes of shared memory per block; "
                         f"the card has {max_shared_bytes}")
    return facts
