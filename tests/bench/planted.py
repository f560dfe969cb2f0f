"""A test-only backend whose variants misbehave on purpose, chosen by the `unroll` knob.

It computes a kernel with the reference interpreter in the kernel's own types (a correct
result), then does what the knob plants. Loaded by the bench worker as
`tests.bench.planted:PlantedBackend`; nothing outside tests uses it.
"""

from __future__ import annotations

import ctypes
import os
import time

import numpy as np
import torch

from emmy_core.codegen.backend import BuildError, LaunchError
from emmy_core.ir import Program
from emmy_core.ir.interpret import run

SPEC = "tests.bench.planted:PlantedBackend"
(CORRECT, HANG, ABORT, WRONG, UNWRITTEN, NONDETERMINISTIC, BUILD_ERROR, LAUNCH_ERROR, SEGFAULT, DECLARED_FREE,
 NOISY) = range(1, 12)


def _np(t: torch.Tensor) -> np.ndarray:
    return t.float().numpy() if t.dtype == torch.bfloat16 else t.numpy()


class PlantedBackend:
    target = "cpu"

    def source(self, program: Program, knobs: dict[str, object], setting: str) -> str:
        return f"/* planted {knobs.get('unroll')} for {program.name} */"

    def nondeterministic(self, program: Program, knobs: dict[str, object]) -> bool:
        """DECLARED_FREE varies between runs like NONDETERMINISTIC, but says so (as atomics would)."""
        return knobs.get("unroll") == DECLARED_FREE

    def build(self, program: Program, knobs: dict[str, object], setting: str):  # type: ignore[no-untyped-def]
        plant = knobs.get("unroll", CORRECT)
        if plant == BUILD_ERROR:
            raise BuildError("planted: this variant does not compile")
        calls = [0]

        def built(buffers: dict[str, torch.Tensor], sizes: dict[str, int]) -> None:
            calls[0] += 1
            if plant == HANG:
                while True:
                    time.sleep(1)
            if plant == ABORT:
                os.abort()
            if plant == SEGFAULT:
                ctypes.string_at(0)
            if plant == NOISY:  # a kernel (or its runtime) writing to standard output, as C code may
                print("planted noise " * 100)
                os.write(1, b"\x00\x00\x00\x05{}{}{}" * 50)
            if plant == LAUNCH_ERROR:
                raise LaunchError("planted: cannot launch")
            outs = run(program, {b.name: _np(buffers[b.name]) for b in program.inputs}, sizes)
            for b in program.outputs:
                value = torch.from_numpy(np.ascontiguousarray(outs[b.name])).to(buffers[b.name].dtype)
                if plant == WRONG:
                    value = value + 1
                if plant in (NONDETERMINISTIC, DECLARED_FREE) and calls[0] > 1:
                    value = value * (1 + 1e-6 * calls[0])
                if plant == UNWRITTEN:
                    keep = buffers[b.name].reshape(-1)[0].clone()
                    buffers[b.name].copy_(value)
                    buffers[b.name].reshape(-1)[0] = keep
                else:
                    buffers[b.name].copy_(value)

        return built
