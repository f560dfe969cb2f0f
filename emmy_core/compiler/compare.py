"""A compiled model beside torch on the same inputs: the largest error, and interleaved median times.

Contenders (the compiled model, torch eager, and `torch.compile` with Inductor) run in turn within
each repeat, in a rotating order, after a warm-up each, so a noisy machine slows all of them alike;
each time is the median of the repeats. A contender that fails (Inductor without a C++ toolchain)
is reported with its error instead of a time.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

Fn = Callable[..., object]


@dataclass
class Comparison:
    max_error: float
    medians_us: dict[str, float]
    repeats: int
    failed: dict[str, str] = field(default_factory=dict)
    load: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def ratio(self, baseline: str, contender: str = "emmy") -> float | None:
        """How many times faster `contender` is than `baseline` (> 1: faster)."""
        a, b = self.medians_us.get(baseline), self.medians_us.get(contender)
        return None if a is None or b is None or b <= 0 else a / b


def max_error(got: object, want: object) -> float:
    gots = got if isinstance(got, tuple) else (got,)
    wants = want if isinstance(want, tuple) else (want,)
    return max(float((g.float() - w.float()).abs().max()) for g, w in zip(gots, wants, strict=True))  # type: ignore[union-attr]


def interleaved_medians(fns: dict[str, Fn], inputs: Sequence[torch.Tensor], repeats: int,
                        warmup: int = 2) -> tuple[dict[str, float], dict[str, str]]:
    """Median microseconds per contender over `repeats` interleaved rounds; failures by name."""
    failed: dict[str, str] = {}
    live: dict[str, Fn] = {}
    for name, fn in fns.items():
        try:
            for _ in range(warmup):
                fn(*inputs)
            live[name] = fn
        except Exception as exc:  # a contender that cannot run is reported, the others still timed
            failed[name] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ''}"
    samples: dict[str, list[float]] = {n: [] for n in live}
    names = list(live)
    for r in range(repeats):
        for name in names[r % len(names):] + names[: r % len(names)] if names else []:
            t0 = time.perf_counter()
            live[name](*inputs)
            samples[name].append(time.perf_counter() - t0)
    return {n: 1e6 * statistics.median(v) for n, v in samples.items() if v}, failed


def medians_line(med: dict[str, float]) -> str:
    """Interleaved medians (microseconds) as one line, with emmy's speed against Inductor's and eager's when all ran."""
    line = ", ".join(f"{name} {us / 1e3:.3f} ms" for name, us in med.items())
    if all(k in med for k in ("emmy", "inductor", "eager")):
        line += f"; emmy {med['inductor'] / med['emmy']:.2f}x Inductor's speed, {med['eager'] / med['emmy']:.2f}x eager's"
    return line


def compare(compiled: Fn, module: nn.Module, inputs: Sequence[torch.Tensor], repeats: int = 20,
            inductor: bool = True) -> Comparison:
    """The compiled model against eager torch (and Inductor) on `inputs`."""
    with torch.no_grad():
        want = module(*inputs)
        error = max_error(compiled(*inputs), want)
        fns: dict[str, Fn] = {"emmy": compiled, "eager": module}
        if inductor:
            fns["inductor"] = torch.compile(module)
        medians, failed = interleaved_medians(fns, inputs, repeats)
    return Comparison(error, medians, repeats, failed, os.getloadavg())
