"""Compiling generated C, caching the shared objects on disk, and launching them on torch tensors.

Builds run the system compiler (`cc` with the setting's flags, `-fopenmp -shared -fPIC
-fno-math-errno -fno-trapping-math`, linked with `-lm`) and are cached under `~/.cache/emmy/build/` (or `$EMMY_BUILD_CACHE`,
read at each build) by the sha256 of the source, the flags and the compiler's identity
(its version line, and with `-march=native` the target it resolves to, so a cache shared
between machines never loads code built for another CPU). A build is written to a
temporary name and renamed into place, so a concurrent builder never sees half a file.
A compiler failure raises `BuildError` carrying its first lines; a launch on tensors
that do not fit the kernel raises `LaunchError` naming the buffer or size at fault.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from emmy_core.codegen.backend import BuildError, LaunchError
from emmy_core.codegen.c_emit import ENTRY
from emmy_core.ir.nodes import Program
from emmy_core.ir.sizes import MAX_SIZE, extents

if TYPE_CHECKING:
    import torch

CACHE_ENV = "EMMY_BUILD_CACHE"
# Neither errno nor the floating-point exception flags are ever read, so loops with math calls
# and with the f16 conversions' selects can vectorise; values are computed as written either way.
BASE_FLAGS = ("-fopenmp", "-shared", "-fPIC", "-fno-math-errno", "-fno-trapping-math")
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

TORCH_DTYPES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64", "i32": "int32",
                "i64": "int64"}


class CBuilt:
    """A compiled kernel: call it with CPU tensors by buffer name and the dynamic sizes."""

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

    def _check(self, buffers: Mapping[str, torch.Tensor], ext: dict[str, int]) -> list[int]:
        import torch

        name = self.program.name
        if not isinstance(buffers, Mapping):
            raise LaunchError(f"{name}: buffers must be a mapping of tensors by buffer name")
        extra = sorted(set(buffers) - {b.name for b in self.program.buffers}, key=str)
        if extra:
            raise LaunchError(f"{name}: {', '.join(map(str, extra))} are not buffers of this kernel")
        ptrs: list[int] = []
        spans: list[tuple[int, int, str, str]] = []
        for b in self.program.buffers:
            t = buffers.get(b.name)
            if t is None:
                raise LaunchError(f"{name}: missing {b.role} buffer {b.name!r}")
            if not isinstance(t, torch.Tensor):
                raise LaunchError(f"{name}: buffer {b.name!r} must be a torch tensor, not {type(t).__name__}")
            want = getattr(torch, TORCH_DTYPES[b.dtype])
            shape = tuple(ext[a] for a in b.shape)
            if t.device.type != "cpu":
                raise LaunchError(f"{name}: buffer {b.name!r} is on {t.device}, the cpu backend needs cpu tensors")
            if t.dtype != want:
                raise LaunchError(f"{name}: buffer {b.name!r} has dtype {t.dtype}, the kernel declares {b.dtype}")
            if tuple(t.shape) != shape:
                raise LaunchError(f"{name}: buffer {b.name!r} has shape {tuple(t.shape)}, expected {shape}")
            if not t.is_contiguous():
                raise LaunchError(f"{name}: buffer {b.name!r} is not contiguous")
            ptrs.append(t.data_ptr())
            spans.append((t.data_ptr(), t.data_ptr() + t.numel() * t.element_size(), b.name, b.role))
        for lo, hi, bname, role in spans:
            if role != "out":
                continue
            for lo2, hi2, other, _ in spans:
                if other != bname and lo < hi2 and lo2 < hi:
                    raise LaunchError(f"{name}: out buffer {bname!r} overlaps buffer {other!r} in memory")
        return ptrs

    def __call__(self, buffers: Mapping[str, torch.Tensor], sizes: Mapping[str, int]) -> None:
        ext = self._sizes(sizes)
        ptrs = self._check(buffers, ext)
        dyn = [ext[a.name] for a in self.program.dynamic_axes]
        c_ptrs = (ctypes.c_void_p * len(ptrs))(*ptrs)
        c_dyn = (ctypes.c_int64 * max(1, len(dyn)))(*dyn)
        rc = self._fn(c_ptrs, c_dyn)
        if rc != 0:
            raise LaunchError(f"{self.program.name}: a thread could not allocate its tile (status {rc})")
