"""The bench worker: a separate process that builds, verifies and times variants for the harness.

Run as `python -m emmy_core.bench.worker`; it speaks length-prefixed JSON frames on its
standard input and output (see `protocol.py`) and sends anything else it or a kernel
prints to standard error. A hang or a crash here costs the harness one variant: it kills
this process and starts another. Requests:

- `hello` {backend: "module:attr"} -> the backend's target, the device, whether timings count;
- `unit` {kernel: text, sizes: "B=8", seed} -> draws fresh inputs and computes the f64
  reference once for every variant of that kernel;
- `variant` {knobs, setting, time, spread_limit} -> build, run on NaN-poisoned outputs,
  compare with the reference (inputs must come back untouched), time, and compare the
  outputs of the last timed run with the first bit for bit (or, for a variant its backend
  declares `nondeterministic(program, knobs)`, with the reference again).
"""

from __future__ import annotations

import faulthandler
import importlib
import os
import sys
import traceback
from dataclasses import dataclass
from typing import Any

import numpy as np

from emmy_core.bench.integrity import summarize
from emmy_core.bench.protocol import read_frame, write_frame
from emmy_core.bench.reference import make_inputs, mismatch, reference, tolerance
from emmy_core.bench.timing import time_cpu, time_cuda
from emmy_core.codegen.backend import BuildError, LaunchError, get_setting
from emmy_core.dtypes import torch_dtype
from emmy_core.ir import Program, extents, parse, parse_sizes, resolve_sizes

TRITON_INTERPRET = "TRITON_INTERPRET"


def load_backend(spec: str) -> Any:
    """A backend from `module:attr` (a class or factory called without arguments, or an instance)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"backend {spec!r} is not 'module:attr'")
    obj = getattr(importlib.import_module(module_name), attr)
    if isinstance(obj, type) or not hasattr(obj, "build"):
        obj = obj()  # a class or a factory
    backend = obj
    if not callable(getattr(backend, "build", None)) or getattr(backend, "target", None) not in ("cpu", "cuda"):
        raise ValueError(f"backend {spec!r} has no build() or no target cpu/cuda")
    return backend


def _to_numpy(t: Any) -> np.ndarray:
    import torch

    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        t = t.float()
    return t.numpy()


def _bits(t: Any) -> bytes:
    import torch

    return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


@dataclass
class LoadedUnit:
    program: Program
    sizes: dict[str, int]
    shapes: dict[str, tuple[int, ...]]
    inputs: dict[str, Any]  # torch tensors on the device
    pristine: dict[str, bytes]  # input bits, to catch a kernel that writes its inputs
    ref: dict[str, np.ndarray]
    rtol: float


class Worker:
    def __init__(self) -> None:
        self.backend: Any = None
        self.device = "cpu"
        self.can_time = True
        self.unit: LoadedUnit | None = None

    # ---- requests ------------------------------------------------------------------------------

    def hello(self, msg: dict[str, Any]) -> dict[str, Any]:
        import torch

        self.backend = load_backend(str(msg["backend"]))
        target = self.backend.target
        self.device = "cuda" if target == "cuda" and torch.cuda.is_available() else "cpu"
        if target == "cuda" and self.device == "cpu":
            os.environ[TRITON_INTERPRET] = "1"  # no GPU: Triton kernels run (for verification) in its interpreter
        interpreted = target == "cuda" and (self.device == "cpu" or os.environ.get(TRITON_INTERPRET) == "1")
        self.can_time = not interpreted  # interpreter timings are never recorded
        return {"target": target, "device": self.device, "can_time": self.can_time, "pid": os.getpid()}

    def prepare(self, msg: dict[str, Any]) -> dict[str, Any]:
        import torch

        program = parse(str(msg["kernel"]), "<bench unit>")
        if not isinstance(program, Program):
            raise ValueError("an extern kernel has no loop program to build")
        sizes = resolve_sizes(program, parse_sizes(str(msg["sizes"])))
        arrays = make_inputs(program, sizes, int(msg.get("seed", 0)))
        ref = reference(program, arrays, sizes)
        ext = extents(program, sizes)
        inputs = {}
        for b in program.inputs:
            t = torch.from_numpy(arrays[b.name]).to(torch_dtype(b.dtype))
            inputs[b.name] = t.to(self.device).contiguous()
        self.unit = LoadedUnit(program, sizes, {b.name: tuple(ext[a] for a in b.shape) for b in program.buffers},
                         inputs, {n: _bits(t) for n, t in inputs.items()}, ref, tolerance(program))
        return {"prepared": True}

    def _poisoned_outputs(self) -> dict[str, Any]:
        import torch

        u = self.unit
        assert u is not None
        outs = {}
        for b in u.program.outputs:
            dt = torch_dtype(b.dtype)
            fill = float("nan") if dt.is_floating_point else torch.iinfo(dt).min
            outs[b.name] = torch.full(u.shapes[b.name], fill, dtype=dt, device=self.device)
        return outs

    def _mismatches(self, outs: dict[str, Any]) -> list[str]:
        u = self.unit
        assert u is not None
        problems = []
        for b in u.program.outputs:
            why = mismatch(_to_numpy(outs[b.name]), u.ref[b.name], u.rtol, b.dtype)
            if why is not None:
                problems.append(f"output {b.name}: {why}")
        return problems

    def variant(self, msg: dict[str, Any]) -> dict[str, Any]:
        u = self.unit
        if u is None:
            raise RuntimeError("variant before unit")
        knobs = dict(msg["knobs"])  # type: ignore[arg-type]
        setting = str(msg["setting"])
        try:
            built = self.backend.build(u.program, knobs, setting)
        except BuildError as exc:
            return {"status": "failed", "failure": "build_error", "message": _short(exc)}
        except Exception as exc:  # a backend bug is this variant's failure, recorded and reported
            return {"status": "failed", "failure": "build_error", "message": _short(exc, with_type=True)}
        outs = self._poisoned_outputs()
        buffers = {**u.inputs, **outs}

        def call() -> None:
            built(buffers, u.sizes)

        try:
            call()
        except LaunchError as exc:
            return {"status": "failed", "failure": "launch_error", "message": _short(exc)}
        except Exception as exc:
            return {"status": "failed", "failure": "runtime", "message": _short(exc, with_type=True)}
        problems = self._mismatches(outs)
        for name, t in u.inputs.items():
            if _bits(t) != u.pristine[name]:
                problems.append(f"input {name} was modified by the kernel")
        if problems:
            return {"status": "flagged", "flags": ["wrong_result"], "message": "; ".join(problems)}
        if not msg.get("time", True):
            return {"status": "ran", "samples_us": []}
        first = {n: _bits(t) for n, t in outs.items()}
        s = get_setting(setting)
        timer = time_cuda if self.device == "cuda" else time_cpu
        try:
            # A backend may time the launch a compile makes (weights bound once) instead of the checked one.
            deployed = getattr(self.backend, "timed_launch", None)
            timed = deployed(built, buffers, u.sizes) if callable(deployed) else call
            samples = timer(timed, s.warmup, s.repeats)
            limit = float(msg.get("spread_limit", float("inf")))
            if summarize(samples).spread > limit:  # one retry before a noisy result is flagged
                samples = timer(timed, s.warmup, s.repeats)
        except LaunchError as exc:
            return {"status": "failed", "failure": "launch_error", "message": _short(exc)}
        except Exception as exc:
            return {"status": "failed", "failure": "runtime", "message": _short(exc, with_type=True)}
        # A backend may declare a variant's order of accumulation free (atomics): then the last run is
        # checked against the reference again instead of bit for bit against the first.
        free = getattr(self.backend, "nondeterministic", None)
        if callable(free) and free(u.program, knobs):
            again = self._mismatches(outs)
            if again:
                return {"status": "flagged", "flags": ["wrong_result"], "samples_us": samples,
                        "message": "after timing: " + "; ".join(again)}
            return {"status": "ran", "samples_us": samples}
        changed = [n for n, t in outs.items() if _bits(t) != first[n]]
        if changed:
            return {"status": "flagged", "flags": ["nondeterministic"], "samples_us": samples,
                    "message": f"output(s) {', '.join(changed)} differ bit for bit between runs of one build"}
        return {"status": "ran", "samples_us": samples}


def _short(exc: BaseException, with_type: bool = False, limit: int = 2000) -> str:
    text = f"{type(exc).__name__}: {exc}" if with_type else str(exc)
    return text if len(text) <= limit else text[: limit - 15] + " ... (cut)"


def main() -> int:
    proto_in = os.fdopen(os.dup(0), "rb", buffering=0)
    proto_out = os.fdopen(os.dup(1), "wb", buffering=0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # stray prints (a kernel's, a compiler's) must not corrupt the frames
    sys.stdout = sys.stderr
    faulthandler.enable()  # a crash leaves its Python stack in the stderr tail the harness reports
    worker = Worker()
    handlers = {"hello": worker.hello, "unit": worker.prepare, "variant": worker.variant}
    while True:
        msg = read_frame(proto_in)
        if msg is None or msg.get("op") == "exit":
            return 0
        handler = handlers.get(str(msg.get("op")))
        try:
            if handler is None:
                raise ValueError(f"unknown request {str(msg.get('op'))[:40]!r}")
            reply = handler(msg)
        except Exception as exc:  # the request failed; the harness decides what that means
            traceback.print_exc(file=sys.stderr)
            reply = {"error": _short(exc, with_type=True)}
        write_frame(proto_out, reply)


if __name__ == "__main__":
    sys.exit(main())
