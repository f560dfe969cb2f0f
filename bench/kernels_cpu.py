"""Do Emmy's CPU kernels run at the speed of the machine, against torch eager and torch.compile?

For each kernel of the chosen models (default `llama_block` and `mlp`) at each shape (default
B=1,S=128 and B=8,S=128) and data type (f32, f16), on this machine's CPU:

- Emmy's first option (what an untuned machine runs) and Emmy tuned (the fastest of a seeded
  sample of `--budget` candidates, first option included, each timed briefly), both through
  prepared launches with the weights packed once, as a compiled model runs them;
- torch eager (the model's own ops: `F.linear`, `torch.matmul`, `F.rms_norm`, `torch.softmax`,
  `F.layer_norm`, with the epilogue as torch ops) and `torch.compile` of the same function.

The four run interleaved (one call of each per round, `--rounds` rounds) and medians are printed,
with GFLOP/s and the share of the machine's f32 FMA peak, as measured by independent FMA chains on every
thread (`emmy_core.bench.peak`; the nominal one, cores x clock x the probed FMA pipes of
`emmy_core.targets.cpu.fma_pipes`, is printed beside it, and used where no C compiler runs) for the matrix products, and torch eager / Emmy (above 1: Emmy faster).
Then the whole block: its kernels chained in graph order (layout steps in torch between them)
with first options and with the tuned ones, against the eager module and `torch.compile` of it.
(The Python cost of one launch is `bench/launch.py`'s question.)

First of all, the matrix products at real decoder sizes (`--products`, default M of 1, 16, 128 and 512 by
Qwen2-0.5B's and TinyLlama's N x K; `--product-dtypes` f32,bf16), each a linear `y = a @ w.T` with the
weight packed once: Emmy's first option and Emmy's best (the fastest of the first option, the fma rule's
option, the first of each `dot` family the card offers, the first with its A and B streams prefetched,
the first of each family that streams B into L2, and a seeded sample of `--budget`), then the first and the best against torch eager (`F.linear`)
interleaved, medians. For f32 at M >= 128 the share of the probed FMA peak; for bf16 the ratio to torch
(and which `dot` won; on `dot=dpbf16` at M >= 128, the share of `vdpbf16ps`'s measured rate, and torch's); for M <= 16 (decode, bound by the weights' bytes) the weights' GB/s against a
read (`Tensor.sum`) of the same bytes in the same rounds: once with one weight (it stays in cache between
calls) and once rotating over copies of the weight that together exceed `--stream-mib` (each call's
weight comes from memory, as a decoder's layers do).

Run: .venv/bin/python bench/kernels_cpu.py [--models llama_block,mlp] [--shapes "B=1,S=128;B=8,S=128"]
     [--dtypes f32,f16] [--budget 8] [--rounds 15] [--no-compile] [--seed 0]
     [--products "1,16,128,512:4864x896,896x4864,5632x2048,2048x5632" | --products ""]
     [--product-dtypes f32,bf16] [--stream-mib 512]
Builds go to the usual build cache (`EMMY_BUILD_CACHE`), so a rerun compiles nothing again.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import torch.nn.functional as F

from emmy_core.bench.peak import measured_dpbf16_peak, measured_fma_peak, memory_bandwidth
from emmy_core.codegen.c import CBackend
from emmy_core.compiler.compare import interleaved_medians
from emmy_core.dtypes import torch_dtype
from emmy_core.graph.lower import KernelStep, LayoutStep, Lowered
from emmy_core.graph.models import build_model
from emmy_core.graph.pipeline import compile_model
from emmy_core.ir.builders import matmul
from emmy_core.ir.facts import facts
from emmy_core.ir.sizes import extents
from emmy_core.knobs import candidates, sample_candidates
from emmy_core.targets import local_card
from emmy_core.targets.cpu import probe_fma_pipes, probe_isa

Fn = Callable[[], object]


def median_us(fn: Fn, n: int = 5) -> float:
    fn()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()
        ts.append((time.perf_counter_ns() - t0) / 1e3)
    return statistics.median(ts)


def interleaved(fns: dict[str, Fn], rounds: int) -> dict[str, float]:
    """Median microseconds of each function over `rounds` interleaved rounds, after one warm-up call
    (`compiler.compare.interleaved_medians`); a function that raises stops the benchmark."""
    times, failed = interleaved_medians(fns, (), rounds, warmup=1)
    if failed:
        raise RuntimeError(f"could not run: {failed}")
    return times


# ---- one kernel: Emmy's launches and torch's ops ------------------------------------------------------


def kernel_tensors(step: KernelStep, dyn: dict[str, int], seed: int) -> dict[str, torch.Tensor]:
    prog = step.program
    ext = extents(prog, dyn)
    g = torch.Generator().manual_seed(seed)
    out = {}
    for b in prog.buffers:
        shape = [ext[a] for a in b.shape]
        t = torch.randn(shape, generator=g) if b.role == "in" else torch.empty(shape)
        out[b.name] = t.to(torch_dtype(b.dtype))
    return out


def emmy_launch(be: CBackend, step: KernelStep, knobs: dict[str, object], dyn: dict[str, int],
                bufs: dict[str, torch.Tensor]) -> Fn:
    """A prepared launch with the weights (inputs without a dynamic axis) bound and packed once."""
    built = be.build(step.program, knobs, "deploy")
    launch = be.timed_launch(built, bufs, dyn)
    return launch


def torch_op(step: KernelStep, node: object, bufs: dict[str, torch.Tensor]) -> Fn | None:
    """The kernel as torch eager computes it (the model's own ops); None for a family without one here."""
    attr = node.attr  # type: ignore[attr-defined]
    if step.family == "matmul":
        a, b = bufs["a"], bufs["b"]
        bt = bool(attr("b_transposed"))
        steps = [str(s) for s in (attr("epilogue") or ())]

        def mm() -> torch.Tensor:
            if b.dim() == 2 and bt:
                y = F.linear(a, b, bufs["bias"] if "bias" in steps else None)
            else:
                y = torch.matmul(a, b.transpose(-1, -2) if bt else b)
                if "bias" in steps:
                    y = y + bufs["bias"]
            for s in steps:
                if s == "relu":
                    y = F.relu(y)
                elif s in ("gelu", "gelu_tanh"):
                    y = F.gelu(y, approximate="tanh" if s == "gelu_tanh" else "none")
                elif s == "silu":
                    y = F.silu(y)
                elif s == "residual":
                    y = y + bufs["residual"]
                elif s == "mul":
                    y = y * bufs["gate"]
                elif s.startswith("scale:"):
                    y = y * float(s[6:])
            return y
        return mm
    if attr("epilogue"):
        return None
    x = bufs["x"]
    if step.family == "rmsnorm":
        eps, w = float(attr("eps")), bufs["w"]  # type: ignore[arg-type]
        if attr("prologue"):
            return lambda: F.rms_norm(x + bufs["res"], (x.shape[-1],), w, eps)
        return lambda: F.rms_norm(x, (x.shape[-1],), w, eps)
    if step.family == "softmax":
        scale = attr("scale")
        return (lambda: torch.softmax(x, -1)) if scale is None else (lambda: torch.softmax(x * float(scale), -1))
    if step.family == "layernorm":
        return lambda: F.layer_norm(x, (x.shape[-1],), bufs["w"], bufs["bias"], float(attr("eps")))  # type: ignore[arg-type]
    return None


def tune(be: CBackend, step: KernelStep, dyn: dict[str, int], bufs: dict[str, torch.Tensor], card: object,
         budget: int, seed: int, pinned: Callable[[dict[str, object]], dict[str, object]]
         ) -> tuple[dict[str, object], int]:
    """The fastest of a seeded sample of the pool (first option included), each timed briefly."""
    best, best_us, failed = None, math.inf, 0
    sample = {str(sorted(pinned(dict(k)).items())): pinned(dict(k))
              for k in sample_candidates(step.program, card, budget, seed)}  # type: ignore[arg-type]
    for knobs in sample.values():
        try:
            us = median_us(emmy_launch(be, step, knobs, dyn, bufs), 9)
        except RuntimeError:
            failed += 1
            continue
        if us < best_us:
            best, best_us = knobs, us
    assert best is not None, f"no candidate of {step.program.name} ran"
    return best, failed


# ---- the whole block, its kernels chained ---------------------------------------------------------------


def chained(be: CBackend, lowered: Lowered, x: torch.Tensor, shape: dict[str, int],
            knobs_of: Callable[[KernelStep], dict[str, object]]) -> Fn:
    """Runs the lowered model: prepared launches in graph order, outputs allocated once, layouts in torch."""
    graph = lowered.graph
    index = graph.index()
    params = {n.name: lowered.weights[str(n.attr("path"))] for n in graph.nodes if n.op == "param"}
    (inp,) = [n.name for n in graph.nodes if n.op == "input"]
    plan: list[tuple[str, object]] = []
    env: dict[str, torch.Tensor] = {inp: x, **params}
    for step in lowered.steps:
        if isinstance(step, LayoutStep):
            plan.append(("layout", step))
            continue
        dyn = step.sizes(shape)
        ext = extents(step.program, dyn)
        outs = {}
        for buf, value in step.outputs:
            b = step.program.buffer(buf)
            outs[buf] = torch.empty([ext[a] for a in b.shape], dtype=torch_dtype(b.dtype))
            if value in index:
                env[value] = outs[buf].reshape(index[value].type.concrete(shape))
        consts = {buf: params[v].reshape([ext[a] for a in step.program.buffer(buf).shape])
                  for buf, v in step.inputs if v in params}
        launch = be.build(step.program, knobs_of(step), "deploy").prepare(dyn, consts)
        shapes = {buf: [ext[a] for a in step.program.buffer(buf).shape] for buf, _ in step.inputs}
        plan.append(("kernel", (launch, [(buf, v, shapes[buf]) for buf, v in step.inputs if v not in params],
                                outs)))
    output = graph.outputs[0]

    def run() -> torch.Tensor:
        for kind, item in plan:
            if kind == "layout":
                step = item
                src = env[step.input]  # type: ignore[attr-defined]
                if step.op == "reshape":  # type: ignore[attr-defined]
                    env[step.node] = src.reshape(index[step.node].type.concrete(shape))  # type: ignore[attr-defined]
                else:
                    env[step.node] = src.permute(*dict(step.attrs)["perm"]).contiguous()  # type: ignore[attr-defined]
                continue
            launch, ins, outs = item  # type: ignore[misc]
            bufs = {buf: env[v].reshape(s) for buf, v, s in ins}
            bufs.update(outs)
            launch(bufs)
        return env[output]
    return run


# ---- matrix products at real sizes ---------------------------------------------------------------------

REAL_PRODUCTS = "1,16,128,512:4864x896,896x4864,5632x2048,2048x5632"  # M values : N x K (Qwen2-0.5B, TinyLlama)


def parse_products(text: str) -> list[tuple[int, int, int]]:
    """`M,M,..:NxK,NxK,..` -> (M, N, K) in order, M outer."""
    if not text.strip():
        return []
    ms, _, nks = text.partition(":")
    pairs = [tuple(int(x) for x in nk.split("x")) for nk in nks.split(",")]
    return [(int(m), n, k) for m in ms.split(",") for n, k in pairs]


def product_pool(program: object, card: object, budget: int, seed: int) -> list[dict[str, object]]:
    """What 'best' chooses among: the first option, the fma rule's, each dot family's first, the first with
    the A and B streams prefetched, the first of each family that streams B into L2, and a seeded sample of the
    pool (duplicates once)."""
    pool = candidates(program, card)  # type: ignore[arg-type]
    picks = [pool[0]]
    picks += [next((o for o in pool if o.get("dot", "fma") == d), None) for d in ("fma", "amx", "dpbf16", "fp16")]  # type: ignore[misc]
    picks.append({**pool[0], "prefetch": 16} if pool[0].get("dot", "fma") != "amx" else None)  # type: ignore[arg-type]
    picks += [next((o for o in pool if "prefetch_l2" in o and o.get("dot", "fma") == d), None)  # type: ignore[misc]
              for d in ("fma", "dpbf16")]  # the first options that stream B (a dynamic or few-row M)
    picks += list(sample_candidates(program, card, budget, seed))  # type: ignore[arg-type]
    out: dict[str, dict[str, object]] = {}
    for k in picks:
        if k is not None:
            out.setdefault(str(sorted(k.items())), dict(k))
    return list(out.values())


def real_products(be: CBackend, card: object, specs: list[tuple[int, int, int]], dtypes: list[str], budget: int,
                  seed: int, rounds: int, peak: float, stream_mib: int,
                  pinned: Callable[[dict[str, object]], dict[str, object]],
                  dot_peaks: dict[str, float]) -> list[tuple[str, float]]:
    """The products section (see the module's docstring); returns (label, torch / best) per product."""
    out: list[tuple[str, float]] = []
    print(f"\n== matrix products at real sizes: y = a @ w.T, weights packed once; medians of {rounds} interleaved "
          "rounds (first / best / torch eager)")
    print(f"{'dtype':<5} {'M':>4} {'N':>5} {'K':>5} {'first us':>9} {'best us':>9} {'torch us':>9} {'best GF/s':>9} "
          f"{'torch/best':>10} {'torch/first':>11}  best's dot, share of peak or weights' GB/s")
    g = torch.Generator().manual_seed(seed)
    for dtype in dtypes:
        for m, n, k in specs:
            ratio = one_product(be, card, dtype, m, n, k, g, budget, seed, rounds, peak, stream_mib, pinned,
                                dot_peaks)
            out.append((f"{dtype} {m}x{n}x{k}", ratio))
    return out


def one_product(be: CBackend, card: object, dtype: str, m: int, n: int, k: int, g: torch.Generator, budget: int,
                seed: int, rounds: int, peak: float, stream_mib: int,
                pinned: Callable[[dict[str, object]], dict[str, object]], dot_peaks: dict[str, float]) -> float:
    """One row of the products section, printed; returns torch / best."""
    tdt = torch_dtype(dtype)
    prog = matmul(m, n, k, dtype=dtype, b_transposed=True)
    a = torch.randn(m, k, generator=g).to(tdt)
    w = torch.randn(n, k, generator=g).to(tdt)
    y = torch.empty(m, n, dtype=tdt)

    def launch(knobs: dict[str, object], weight: torch.Tensor = w) -> Fn:
        run = be.build(prog, knobs, "deploy").prepare({}, {"b": weight})
        return lambda: run({"a": a, "y": y})

    timed = []
    for knobs in product_pool(prog, card, budget, seed):
        knobs = pinned(knobs)
        try:
            timed.append((median_us(launch(knobs), 5), knobs))
        except RuntimeError as exc:
            print(f"  (a candidate failed: {str(exc)[:80]})")
    best = min(timed, key=lambda t: t[0])[1]
    first = pinned(candidates(prog, card)[0])  # type: ignore[arg-type]
    with torch.no_grad():
        fns = {"first": launch(first), "best": launch(best), "torch": lambda: F.linear(a, w)}
        fns["best"]()
        want = F.linear(a.double(), w.double())
        err = float((y.double() - want).abs().max() / want.abs().max())
        t = interleaved(fns, rounds)
    gfs = 2 * m * n * k / t["best"] / 1e3
    ratio, first_ratio = t["torch"] / t["best"], t["torch"] / t["first"]
    note = f"dot={best.get('dot', 'fma')}"
    if dtype == "f32" and m >= 128:
        note += f", {gfs / peak:.0%} of the f32 FMA peak (first {gfs * t['best'] / t['first'] / peak:.0%})"
    dot = str(best.get("dot", "fma"))
    if dtype == "bf16" and m >= 128 and dot in dot_peaks:
        note += f", {gfs / dot_peaks[dot]:.0%} of the measured {dot} peak (torch {gfs / ratio / dot_peaks[dot]:.0%})"
    if m <= 16:
        wbytes = n * k * w.element_size()
        note += f", weights {wbytes / t['best'] / 1e3:.1f} GB/s in cache"
        note += stream_note(launch, best, w, wbytes, rounds, stream_mib)
    note += f", max rel err {err:.1e}"
    print(f"{dtype:<5} {m:>4} {n:>5} {k:>5} {t['first']:9.1f} {t['best']:9.1f} {t['torch']:9.1f} {gfs:9.1f} "
          f"{ratio:10.2f} {first_ratio:11.2f}  {note}", flush=True)
    return ratio


def stream_note(launch: Callable[..., Fn], knobs: dict[str, object], w: torch.Tensor, wbytes: int, rounds: int,
                stream_mib: int) -> str:
    """A decode product over copies of its weight that exceed `stream_mib` together, interleaved with a read of
    the same copies: the weights' GB/s and the read's, as text."""
    copies = max(2, -(-stream_mib * 2**20 // wbytes))
    ws = [w.clone() for _ in range(copies)]
    calls = [launch(knobs, c) for c in ws]

    def emmy() -> None:
        for c in calls:
            c()

    views = [c.view(torch.float32) if c.element_size() == 2 and c.numel() % 2 == 0 else c for c in ws]

    def read() -> None:  # the same bytes as f32 (a 16-bit sum widens every value: it runs below the memory's rate)
        for c in views:
            c.sum()

    with torch.no_grad():
        t = interleaved({"emmy": emmy, "read": read}, max(3, rounds // 3))
    got, mem = copies * wbytes / t["emmy"] / 1e3, copies * wbytes / t["read"] / 1e3
    return (f"; over {copies} copies ({copies * wbytes / 2**20:.0f} MiB) {got:.1f} GB/s against a read's "
            f"{mem:.1f} ({got / mem:.0%})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="llama_block,mlp")
    ap.add_argument("--shapes", default="B=1,S=128;B=8,S=128")
    ap.add_argument("--dtypes", default="f32,f16")
    ap.add_argument("--budget", type=int, default=8, help="candidates timed per kernel for 'tuned'")
    ap.add_argument("--rounds", type=int, default=15, help="interleaved rounds per comparison")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile (its first compile is slow)")
    ap.add_argument("--threads", type=int, default=0,
                    help="threads for torch and for every Emmy option (default: all usable cores)")
    ap.add_argument("--products", default=REAL_PRODUCTS,
                    help="matrix products at real sizes, M,M,..:NxK,.. ('' skips them)")
    ap.add_argument("--product-dtypes", default="f32,bf16")
    ap.add_argument("--stream-mib", type=int, default=512,
                    help="MiB of weight copies a decode product streams through (beyond the caches)")
    args = ap.parse_args()

    t_start = time.monotonic()
    card = local_card()
    if card.target != "cpu":
        print(f"this machine's card is {card.name}; this benchmark measures the CPU", file=sys.stderr)
        return 2
    isa = probe_isa()
    threads = args.threads or card.cores or 1
    torch.set_num_threads(threads)

    def pinned(knobs: dict[str, object]) -> dict[str, object]:
        return {**knobs, "threads": threads} if args.threads else dict(knobs)

    def first(program: object) -> dict[str, object]:
        return pinned(candidates(program, card)[0])  # type: ignore[arg-type]

    pipes = probe_fma_pipes()
    nominal = threads * (card.freq_mhz or float("nan")) / 1e3 * pipes.f32_flops_per_cycle(isa.fma)
    measured = measured_fma_peak(threads, isa.simd_bits)
    peak = measured if measured is not None else nominal  # the shares below are of the measured rate where it ran
    dpbf16 = measured_dpbf16_peak(threads) if "avx512_bf16" in card.tensor_cores else None
    dot_peaks = {"dpbf16": dpbf16} if dpbf16 is not None else {}
    load0 = os.getloadavg()
    print(f"card {card.name}: {threads} cores at {card.freq_mhz} MHz, {isa.simd_bits}-bit SIMD, FMA {isa.fma}, "
          f"F16C {isa.f16c}, {isa.vector_registers} vector registers; L1d {card.l1d_kib} KiB, L2 {card.l2_kib} KiB, "
          f"L3 {card.l3_kib} KiB")
    print(f"CPU {card.name}; matrix instructions: {', '.join(card.tensor_cores) or 'none'} (AVX512-FP16 "
          f"{isa.avx512fp16}, AMX tiles {isa.amx_tile}, the OS's AMX permission {isa.amx_permitted}); memory read "
          f"{memory_bandwidth(args.stream_mib):.1f} GB/s over {args.stream_mib} MiB")
    print(f"FMA pipes per core: {pipes.known}; nominal f32 peak {nominal:.0f} GFLOP/s "
          f"({pipes.f32_flops_per_cycle(isa.fma)} flops per cycle per core at the probed clock); measured "
          + (f"{measured:.0f} GFLOP/s (independent FMA chains on {threads} threads): the peak the shares below are of"
             if measured is not None else "peak unavailable (no C compiler ran): shares are of the nominal peak")
          + (f"; vdpbf16ps {dpbf16:.0f} GFLOP/s (bf16 products on dot=dpbf16 are shares of it)" if dpbf16 else ""))
    print(f"torch {torch.__version__} on {torch.get_num_threads()} threads; load average {load0[0]:.2f} "
          f"{load0[1]:.2f} on {os.cpu_count()} CPUs (timings are noisy above ~0.5)", flush=True)
    be = CBackend()
    summary: list[tuple[str, float]] = []
    products = real_products(be, card, parse_products(args.products), args.product_dtypes.split(","), args.budget,
                             args.seed, args.rounds, peak, args.stream_mib, pinned, dot_peaks)
    for dtype in args.product_dtypes.split(","):
        ratios = [r for label, r in products if label.startswith(dtype + " ")]
        if ratios:
            print(f"{dtype} products: torch / Emmy's best geomean "
                  f"{math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f}, min {min(ratios):.2f} over {len(ratios)}")
    for model in [m for m in args.models.split(",") if m]:
        for shape_text in args.shapes.split(";"):
            shape = {k: int(v) for k, v in (p.split("=") for p in shape_text.split(","))}
            for dtype in args.dtypes.split(","):
                t0 = time.monotonic()
                lowered = compile_model(model, shape, torch_dtype(dtype))
                index = lowered.graph.index()
                print(f"\n== {model} {shape_text} {dtype}  (lowered in {time.monotonic() - t0:.1f} s)")
                print(f"{'kernel':<42} {'sizes':<13} {'first us':>9} {'tuned us':>9} {'eager us':>9} "
                      f"{'compile':>9} {'tuned GF/s':>10} {'peak':>5} {'eager/tuned':>11} {'eager/first':>11}")
                seen: dict[tuple[str, str], dict[str, object]] = {}
                for step in lowered.kernels:
                    dyn = step.sizes(shape)
                    key = (step.kernel_id, ",".join(f"{k}={v}" for k, v in sorted(dyn.items())))
                    if key in seen:
                        continue
                    bufs = kernel_tensors(step, dyn, args.seed)
                    tuned, failed = tune(be, step, dyn, bufs, card, args.budget, args.seed, pinned)
                    seen[key] = tuned
                    fns: dict[str, Fn] = {
                        "first": emmy_launch(be, step, first(step.program), dyn, bufs),
                        "tuned": emmy_launch(be, step, tuned, dyn, bufs)}
                    op = torch_op(step, index[step.node], bufs)
                    if op is not None:
                        fns["eager"] = op
                        if not args.no_compile:
                            torch._dynamo.reset()  # one function compiled per kernel: no recompile limit reached
                            fns["compile"] = torch.compile(op, dynamic=False)
                    with torch.no_grad():
                        t = interleaved(fns, args.rounds)
                    flops = facts(step.program, dyn).flops
                    gfs = flops / t["tuned"] / 1e3
                    cells = [f"{t.get(k, float('nan')):9.1f}" for k in ("first", "tuned", "eager", "compile")]
                    mm = step.family == "matmul"
                    ratio = t["eager"] / t["tuned"] if "eager" in t else float("nan")
                    rate = f"{gfs:10.1f} {gfs / peak:5.0%}" if mm else " " * 16
                    first_ratio = t["eager"] / t["first"] if "eager" in t else float("nan")
                    note = f"  ({failed} candidates failed)" if failed else ""
                    print(f"{step.program.name[:42]:<42} {key[1][:13]:<13} {' '.join(cells)} {rate} "
                          f"{ratio:11.2f} {first_ratio:11.2f}{note}")
                    summary.append((f"{model} {shape_text} {dtype} {step.family}", ratio))
                tuned_of = {k[0]: v for k, v in seen.items()}
                module, example = build_model(model, torch_dtype(dtype))
                (x,) = example(shape)
                fns = {"emmy first": chained(be, lowered, x, shape, lambda s: first(s.program)),
                       "emmy tuned": chained(be, lowered, x, shape, lambda s, t=tuned_of: t[s.kernel_id]),
                       "torch eager": lambda m=module, x=x: m(x)}
                if not args.no_compile:
                    torch._dynamo.reset()
                    compiled = torch.compile(module, dynamic=False)
                    fns["torch.compile"] = lambda c=compiled, x=x: c(x)
                with torch.no_grad():
                    want = module(x).double()
                    got = fns["emmy tuned"]().double()
                    err = float((got - want).abs().max())
                    t = interleaved(fns, args.rounds)
                print(f"whole block, kernels chained (max |emmy - eager| {err:.2e}): " + ", ".join(
                    f"{k} {v / 1e3:.2f} ms" for k, v in t.items()) +
                    f"; eager / emmy tuned {t['torch eager'] / t['emmy tuned']:.2f}" +
                    (f", compile / emmy tuned {t['torch.compile'] / t['emmy tuned']:.2f}" if "torch.compile" in t
                     else ""))
    ratios = [r for _, r in summary if r == r]
    if ratios:
        print(f"eager / tuned over {len(ratios)} kernels: geomean {math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f}"
              f", min {min(ratios):.2f}")
    load1 = os.getloadavg()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"load average before {load0[0]:.2f}, after {load1[0]:.2f}; peak memory {rss:.0f} MiB; "
          f"wall {time.monotonic() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
