"""A compiled model beside torch on the same inputs: the largest error, and interleaved median times.

Contenders (the compiled model, torch eager, and `torch.compile` with Inductor) run in turn within
each repeat, in a rotating order, after a warm-up each, so a noisy machine slows all of them alike;
each time is the median of the repeats. A contender that fails (Inductor without a C++ toolchain)
is reported with its error instead of a time.

`check_outputs` is the build-time check of a group against torch: the harness's own tolerance
(`emmy_core.bench.reference.RTOL`), relative to each value and the output's scale.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from emmy_core.bench.reference import RTOL

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


def check_outputs(got: Sequence[torch.Tensor], want: Sequence[torch.Tensor], dtype: str) -> str | None:
    """Why `got` is not `want` within the harness's tolerance |got - want| <= rtol (|want| + rms(want)), or None."""
    rtol = RTOL[dtype]
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        if g.shape != w.shape:
            return f"output {i} has shape {tuple(g.shape)}, torch's {tuple(w.shape)}"
        if _close_at_once(g.detach(), w.detach(), rtol):
            continue
        g64, w64 = g.detach().double(), w.detach().double()
        if not (bool(torch.isfinite(w64).all()) and bool(torch.isfinite(g64).all())):  # else: fewer ops, the usual case
            finite = torch.isfinite(w64)
            if not torch.equal(finite, torch.isfinite(g64)) or not torch.equal(g64[~finite].nan_to_num(),
                                                                              w64[~finite].nan_to_num()):
                return f"output {i} is not finite where torch's is (or the reverse)"
            g64, w64 = g64[finite], w64[finite]
        if w64.numel() == 0:
            continue
        scale = float(w64.pow(2).mean().sqrt())
        err = (g64 - w64).abs()
        bad = err > rtol * (w64.abs() + scale)
        if bool(bad.any()):
            return (f"output {i}: {int(bad.sum())} of {bad.numel()} values off, worst abs error {float(err.max()):.3g} "
                    f"(scale {scale:.3g}, rtol {rtol:g})")
    return None


def _close_at_once(g: torch.Tensor, w: torch.Tensor, rtol: float) -> bool:
    """The usual case of `check_outputs` in a few ops on temporaries of its own (a new size's check runs on every
    new length a server meets): floating outputs, torch's all finite (else its scale is not), every value within
    the tolerance |g - w| <= rtol (|w| + scale) (a NaN or infinity of Emmy's compares false), compared in f32 (f64
    where either is f64: f32 holds every 16-bit value and rounds each difference far below any tolerance). False
    sends the pair to the full comparison, which says what is off. (`torch.isclose` and a separate finiteness
    pass took 2.5-4x as long at a small model's sizes; the largest of one difference, not a comparison per value,
    saves two ops more.)"""
    if not (g.is_floating_point() and w.is_floating_point()) or w.numel() == 0:
        return False
    wide = torch.float64 if torch.float64 in (g.dtype, w.dtype) else torch.float32
    g, w = g.to(wide), w.to(wide)
    scale = float(torch.linalg.vector_norm(w)) / math.sqrt(w.numel())
    if not math.isfinite(scale):
        return False
    # |g - w| - rtol |w| <= rtol scale at every value, as its largest (NaN where any is: compares false)
    return float((g - w).abs_().sub_(w.abs(), alpha=rtol).max()) <= rtol * scale


def _off(t: torch.Tensor, r: torch.Tensor) -> tuple[float, float] | None:
    """The worst and the root-mean-square distance of `t` from `r` (None where either is not finite)."""
    d = t.detach().double() - r.detach().double()
    return (float(d.abs().max()), float(d.pow(2).mean().sqrt())) if bool(torch.isfinite(d).all()) else None


def as_exact_as_torch(got: Sequence[torch.Tensor], want: Sequence[torch.Tensor], ref: Sequence[torch.Tensor],
                      dtype: str) -> bool:
    """Whether each of Emmy's outputs `got` is torch's answer `want` within tolerance, or the wider answer `ref`
    (the same ops on f32 inputs) within tolerance, or no farther from `ref` than torch's own, by its worst and
    its root-mean-square error both: the 16-bit group the backend keeps although it misses torch's rounding."""
    if not len(got) == len(want) == len(ref):
        return False
    for g, w, r in zip(got, want, ref, strict=True):
        if check_outputs([g], [w], dtype) is None or check_outputs([g], [r], dtype) is None:
            continue
        if g.shape != r.shape or w.shape != r.shape or g.numel() == 0:
            return False
        ours, theirs = _off(g, r), _off(w, r)
        if ours is None or theirs is None or ours[0] > theirs[0] or ours[1] > theirs[1]:
            return False
    return True
