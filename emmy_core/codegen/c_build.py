"""Compiling generated C, caching the shared objects on disk, and launching them on torch tensors.

Builds run the system compiler (`cc` with the setting's flags, `-fopenmp -shared -fPIC
-fno-math-errno -fno-trapping-math`, linked with `-lm`) and are cached under `~/.cache/emmy/build/` (or `$EMMY_BUILD_CACHE`,
read at each build) by the sha256 of the source, the flags and the compiler's identity
(its version line, and with `-march=native` the target it resolves to, so a cache shared
between machines never loads code built for another CPU). A build is written to a
temporary name and renamed into place, so a concurrent builder never sees half a file.
A compiler failure raises `BuildError` carrying its first lines; a checked launch on
tensors that do not fit the kernel raises `LaunchError` naming the buffer or size at fault.
`CBuilt.prepare(sizes, constants)` checks once and returns a `Launch` that calls straight
through (a few microseconds of Python), with constant operands bound and a matmul's B
packed once (interface of the compile path).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from emmy_core.codegen.backend import BuildError, LaunchError
from emmy_core.codegen.c_emit import ENTRY
from emmy_core.codegen.c_matmul import PACK_BYTES_ENTRY, PACK_ENTRY, packed_operand
from emmy_core.dtypes import torch_dtype
from emmy_core.ir.nodes import Buffer, Program
from emmy_core.ir.sizes import MAX_SIZE, extents

if TYPE_CHECKING:
    import torch

CACHE_ENV = "EMMY_BUILD_CACHE"
# Neither errno nor the floating-point exception flags are ever read, so loops with math calls
# and with the f16 conversions' selects can vectorise; values are computed as written either way:
# no multiply-add is fused unless the source asks for it (the matmul's micro-kernel does).
BASE_FLAGS = ("-fopenmp", "-shared", "-fPIC", "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=off")
LIBS = ("-lm",)
COMPILE_TIMEOUT_S = 300
ERROR_LINES = 20


def cache_dir() -> Path:
    """Where builds are cached: `$EMMY_BUILD_CACHE`, else `~/.cache/emmy/build`."""
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "emmy" / "build"


@functools.lru_cache(maxsize=8)
def compiler_identity(cc: str, flags: tuple[str, ...]) -> str:
    """The compiler's version line, plus the resolved target options when the flags say -march=native."""
    try:
        version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        raise BuildError(f"C compiler {cc!r} is not usable: {exc}") from None
    ident = version.stdout.splitlines()[0] if version.stdout else cc
    if "-march=native" in flags:
        probe = subprocess.run([cc, *flags, "-E", "-v", "-"], input="", capture_output=True, text=True,
                               timeout=60, check=False)
        target = [ln for ln in probe.stderr.splitlines() if "cc1" in ln and "-march=" in ln]
        ident += "\n" + " ".join(w for w in (target[0].split() if target else []) if w.startswith(("-m", "--param")))
    return ident


def build_key(source: str, flags: tuple[str, ...], compiler: str) -> str:
    h = hashlib.sha256()
    for part in (source, "\0".join(flags), compiler):
        h.update(part.encode("utf-8"))
        h.update(b"\0\1\0")
    return h.hexdigest()


class CCompiler:
    """Compiles C source into cached shared objects; `compiles` counts compiler runs by this instance."""

    def __init__(self, cc: str = "cc") -> None:
        self.cc = cc
        self.compiles = 0

    def command(self, flags: tuple[str, ...], src: Path, out: Path) -> list[str]:
        return [self.cc, *flags, *BASE_FLAGS, "-o", str(out), str(src), *LIBS]

    def library(self, source: str, flags: tuple[str, ...], what: str) -> Path:
        """The shared object of `source` built with `flags`: from the cache, else compiled into it."""
        flags = tuple(flags)
        key = build_key(source, (*flags, *BASE_FLAGS, *LIBS), compiler_identity(self.cc, flags))
        folder = cache_dir()
        target = folder / f"{key}.so"
        if target.is_file():
            return target
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="emmy-cc-", dir=folder) as tmp:
            src = Path(tmp) / f"{key}.c"
            src.write_text(source, encoding="utf-8")
            out = Path(tmp) / f"{key}.so"
            self.compiles += 1
            try:
                run = subprocess.run(self.command(flags, src, out), capture_output=True, text=True,
                                     timeout=COMPILE_TIMEOUT_S, check=False)
            except subprocess.TimeoutExpired:
                raise BuildError(f"{what}: the C compiler ran past {COMPILE_TIMEOUT_S} s") from None
            except OSError as exc:
                raise BuildError(f"{what}: cannot run the C compiler {self.cc!r}: {exc}") from None
            if run.returncode != 0 or not out.is_file():
                lines = (run.stderr or run.stdout).replace(str(src), f"{key[:12]}.c").splitlines()
                head = "\n".join(lines[:ERROR_LINES])
                raise BuildError(f"{what}: the C compiler failed (exit {run.returncode}):\n{head}")
            os.replace(src, folder / f"{key}.c")  # kept beside the build, for reading
            os.replace(out, target)
        return target


# ---- launching -----------------------------------------------------------------------------------

class Launch:
    """A prepared launch: `launch(buffers)` runs the kernel at the sizes `CBuilt.prepare` checked.

    Nothing is checked per call: the buffers must be the non-constant ones `prepare` named,
    CPU tensors of the shapes and dtypes it checked, contiguous, outputs overlapping
    nothing. The constants stay bound (a matmul's B as panels packed once: a later change
    to the constant tensor is not seen). A launch reuses one pointer array: one Python
    thread at a time.
    """

    __slots__ = ("_dyn", "_fn", "_keep", "_name", "_ndyn", "_ptrs", "_slots")

    def __init__(self, fn: ctypes._CFuncPtr, ptrs: ctypes.Array, dyn: ctypes.Array,  # type: ignore[name-defined]
                 slots: tuple[tuple[int, str], ...], keep: tuple[object, ...], name: str, ndyn: int = 0) -> None:
        self._fn, self._ptrs, self._dyn, self._slots, self._keep, self._name = fn, ptrs, dyn, slots, keep, name
        self._ndyn = ndyn  # the kernel's dynamic axes (`dyn` holds at least one slot)

    @property
    def buffers(self) -> tuple[str, ...]:
        """The names a call takes, in the kernel's buffer order."""
        return tuple(n for _, n in self._slots)

    def __call__(self, buffers: Mapping[str, torch.Tensor]) -> None:
        ptrs = self._ptrs
        for i, name in self._slots:
            ptrs[i] = buffers[name].data_ptr()
        if self._fn(ptrs, self._dyn):
            raise LaunchError(f"{self._name}: a thread could not allocate its working memory")

    def over(self, fixed: Mapping[str, torch.Tensor], per_call: Mapping[str, str]) -> _LaunchOver:
        """This launch with the buffers in `fixed` (allocated once by the caller, never moved) bound for good,
        taking the others from a mapping by the keys `per_call` names (buffer -> key): `call(env)`.

        A model's launch then writes only the pointers that change per call, with no dictionary made and no
        view taken (a launch reads a buffer's address alone). `fixed` and `per_call` must name every buffer
        this launch takes; ValueError otherwise. Unlike `__call__`, the pointer array becomes the returned
        call's: use one or the other."""
        names = {n for _, n in self._slots}
        if set(fixed) | set(per_call) != names or set(fixed) & set(per_call):
            raise ValueError(f"{self._name}: a launch over fixed and per-call buffers names each of "
                             f"{', '.join(sorted(names))} once")
        for i, n in self._slots:
            if n in fixed:
                self._ptrs[i] = fixed[n].data_ptr()
        pairs = tuple((i, per_call[n]) for i, n in self._slots if n in per_call)
        return _LaunchOver(self, tuple(fixed.values()), pairs)


class _LaunchOver:
    """`Launch.over`'s call: the per-call pointers written from `env`, the fixed tensors kept alive."""

    __slots__ = ("_dyn", "_fixed", "_launch", "_pairs")

    def __init__(self, launch: Launch, fixed: tuple[object, ...], pairs: tuple[tuple[int, str], ...],
                 dyn: ctypes.Array | None = None) -> None:  # type: ignore[type-arg]
        self._launch, self._fixed, self._pairs = launch, fixed, pairs
        self._dyn = launch._dyn if dyn is None else dyn

    def at(self, sizes: Sequence[int]) -> _LaunchOver:
        """The same call at other sizes of the kernel's dynamic axes (in the program's order): the same pointers,
        so the fixed buffers must hold the data of those sizes at their front (a runner serving a size bucket
        allocates them for its largest: `Runner.sized`). The calls share the pointer array: one at a time."""
        if len(sizes) != self._launch._ndyn:
            raise LaunchError(f"{self._launch._name}: {len(sizes)} sizes given for {self._launch._ndyn} dynamic axes")
        for v in sizes:
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_SIZE:
                raise LaunchError(f"{self._launch._name}: a size must be an integer in 1..{MAX_SIZE}, got {v!r}")
        dyn = (ctypes.c_int64 * max(1, len(sizes)))(*sizes)
        return _LaunchOver(self._launch, self._fixed, self._pairs, dyn)

    def __call__(self, env: Mapping[str, torch.Tensor]) -> None:
        launch = self._launch
        ptrs = launch._ptrs
        for i, key in self._pairs:
            ptrs[i] = env[key].data_ptr()
        if launch._fn(ptrs, self._dyn):
            raise LaunchError(f"{launch._name}: a thread could not allocate its working memory")


class CBuilt:
    """A compiled kernel: call it with CPU tensors by buffer name and the dynamic sizes (checked), or
    `prepare` it once per size for launches without checks."""

    def __init__(self, program: Program, path: Path) -> None:
        self.program = program
        self.path = path
        try:
            self._lib = ctypes.CDLL(str(path))
            fn = getattr(self._lib, ENTRY)
        except (OSError, AttributeError) as exc:
            raise BuildError(f"{program.name}: cannot load the build {path.name}: {exc}") from None
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int64)]
        self._fn = fn
        self._packed = packed_operand(program)
        if self._packed is not None:
            try:
                self._pack = getattr(self._lib, PACK_ENTRY)
                self._pack_bytes = getattr(self._lib, PACK_BYTES_ENTRY)
            except AttributeError as exc:
                raise BuildError(f"{program.name}: the build {path.name} has no packing entry: {exc}") from None
            self._pack.restype = ctypes.c_int
            self._pack.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int64), ctypes.c_void_p]
            self._pack_bytes.restype = ctypes.c_int64
            self._pack_bytes.argtypes = [ctypes.POINTER(ctypes.c_int64)]

    def _sizes(self, sizes: Mapping[str, int]) -> dict[str, int]:
        name = self.program.name
        if not isinstance(sizes, Mapping):
            raise LaunchError(f"{name}: sizes must be a mapping of dynamic axis sizes")
        dyn = [a.name for a in self.program.dynamic_axes]
        extra = sorted(set(sizes) - set(dyn), key=str)
        if extra:
            raise LaunchError(f"{name}: sizes name axes that are not dynamic axes: {', '.join(map(str, extra))}")
        for ax in dyn:
            v = sizes.get(ax)
            if v is None:
                raise LaunchError(f"{name}: no size given for dynamic axis {ax!r}")
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_SIZE:
                raise LaunchError(f"{name}: size of {ax!r} must be an integer in 1..{MAX_SIZE}, got {v!r}")
        return extents(self.program, dict(sizes))

    def _tensor(self, b: Buffer, t: object, ext: dict[str, int]) -> torch.Tensor:
        """`t` checked as the tensor of buffer `b` at extents `ext`; LaunchError naming what does not fit."""
        import torch

        name = self.program.name
        if t is None:
            raise LaunchError(f"{name}: missing {b.role} buffer {b.name!r}")
        if not isinstance(t, torch.Tensor):
            raise LaunchError(f"{name}: buffer {b.name!r} must be a torch tensor, not {type(t).__name__}")
        want = torch_dtype(b.dtype)
        shape = tuple(ext[a] for a in b.shape)
        if t.device.type != "cpu":
            raise LaunchError(f"{name}: buffer {b.name!r} is on {t.device}, the cpu backend needs cpu tensors")
        if t.dtype != want:
            raise LaunchError(f"{name}: buffer {b.name!r} has dtype {t.dtype}, the kernel declares {b.dtype}")
        if tuple(t.shape) != shape:
            raise LaunchError(f"{name}: buffer {b.name!r} has shape {tuple(t.shape)}, expected {shape}")
        if not t.is_contiguous():
            raise LaunchError(f"{name}: buffer {b.name!r} is not contiguous")
        return t

    def _check(self, buffers: Mapping[str, torch.Tensor], ext: dict[str, int]) -> list[int]:
        name = self.program.name
        if not isinstance(buffers, Mapping):
            raise LaunchError(f"{name}: buffers must be a mapping of tensors by buffer name")
        extra = sorted(set(buffers) - {b.name for b in self.program.buffers}, key=str)
        if extra:
            raise LaunchError(f"{name}: {', '.join(map(str, extra))} are not buffers of this kernel")
        ptrs: list[int] = []
        spans: list[tuple[int, int, str, str]] = []
        for b in self.program.buffers:
            t = self._tensor(b, buffers.get(b.name), ext)
            ptrs.append(t.data_ptr())
            spans.append((t.data_ptr(), t.data_ptr() + t.numel() * t.element_size(), b.name, b.role))
        for lo, hi, bname, role in spans:
            if role != "out":
                continue
            for lo2, hi2, other, _ in spans:
                if other != bname and lo < hi2 and lo2 < hi:
                    raise LaunchError(f"{name}: out buffer {bname!r} overlaps buffer {other!r} in memory")
        return ptrs

    def _dyn(self, ext: dict[str, int]) -> ctypes.Array:  # type: ignore[type-arg]
        dyn = [ext[a.name] for a in self.program.dynamic_axes]
        return (ctypes.c_int64 * max(1, len(dyn)))(*dyn)

    def __call__(self, buffers: Mapping[str, torch.Tensor], sizes: Mapping[str, int]) -> None:
        ext = self._sizes(sizes)
        ptrs = self._check(buffers, ext)
        c_ptrs = (ctypes.c_void_p * (len(ptrs) + 1))(*ptrs, None)  # + the slot of a B packed beforehand
        rc = self._fn(c_ptrs, self._dyn(ext))
        if rc != 0:
            raise LaunchError(f"{self.program.name}: a thread could not allocate its tile (status {rc})")

    def prepare(self, sizes: Mapping[str, int], constants: Mapping[str, torch.Tensor] | None = None,
                packs: dict[tuple[object, ...], tuple[object, torch.Tensor]] | None = None) -> Launch:
        """A launch at `sizes` with `constants` (input buffers by name, e.g. weights) bound once, checked here.

        A matmul's B among the constants is packed into its panels now, once, instead of at
        every launch. The returned `Launch` takes the other buffers and checks nothing. With `packs`
        (a cache its caller keeps, e.g. per compiled group), a B of static shape packed by this build
        for another size is taken from it: the panels depend on B, its version and the build only.
        """
        import torch

        name = self.program.name
        ext = self._sizes(sizes)
        constants = {} if constants is None else constants
        if not isinstance(constants, Mapping):
            raise LaunchError(f"{name}: constants must be a mapping of tensors by input buffer name")
        inputs = {b.name: b for b in self.program.inputs}
        bad = sorted((str(n) for n in constants if n not in inputs), key=str)
        if bad:
            raise LaunchError(f"{name}: constants must be input buffers; {', '.join(n[:40] for n in bad)} "
                              f"{'is' if len(bad) == 1 else 'are'} not")
        bound = {n: self._tensor(inputs[n], t, ext) for n, t in constants.items()}
        dyn = self._dyn(ext)
        buffers = self.program.buffers
        ptrs = (ctypes.c_void_p * (len(buffers) + 1))()
        keep: list[object] = list(bound.values())
        if self._packed is not None and self._packed in bound:
            b_tensor = bound[self._packed]
            ptrs[[b.name for b in buffers].index(self._packed)] = b_tensor.data_ptr()
            nbytes = int(self._pack_bytes(dyn))
            static = not any(self.program.axis(a).dynamic for a in self.program.buffer(self._packed).shape)
            version = -1 if b_tensor.is_inference() else b_tensor._version  # inference tensors keep no counter
            key = (id(self), self._packed, b_tensor.data_ptr(), version, nbytes)
            hit = packs.get(key) if packs is not None and static else None
            if hit is not None:
                packed = hit[1]
            else:
                packed = torch.empty(nbytes, dtype=torch.uint8)
                if self._pack(ptrs, dyn, packed.data_ptr()) != 0:
                    raise LaunchError(f"{name}: packing {self._packed!r} could not allocate its working memory")
                if packs is not None and static:
                    packs[key] = (self, packed)  # the build kept alive with its panels, so its id names only it
            ptrs[len(buffers)] = (packed.data_ptr() + 63) // 64 * 64  # where emmy_pack wrote: 64-byte aligned
            keep.append(packed)
        for i, b in enumerate(buffers):
            if b.name in bound:
                ptrs[i] = bound[b.name].data_ptr()
        slots = tuple((i, b.name) for i, b in enumerate(buffers) if b.name not in bound)
        return Launch(self._fn, ptrs, dyn, slots, tuple(keep), name, len(self.program.dynamic_axes))
