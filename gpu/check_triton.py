"""Checks Emmy's generated Triton kernels on a CUDA GPU at real sizes: correct against torch, and how fast.

Usage (repository on PYTHONPATH; needs only torch, triton and numpy):

    python gpu/check_triton.py RESULTS.json [--quick] [--only SUBSTRING]...
    python gpu/check_triton.py RESULTS.json --smoke     # no GPU: tiny sizes under the interpreter

Every family is built from its loop program at a serving size (matmul 4096^3 f16 with
bias+gelu, batched attention scores, rmsnorm 8192x4096 with the residual stream, softmax
4096x4096, layernorm, elementwise chains) and both split decisions run piece by piece,
under a few knob settings each. For every variant: build, run once on fresh random
inputs (outputs poisoned with NaN first), compare with torch, time the kernel with
`triton.testing.do_bench` (median, ms) next to the torch eager baseline measured in the
same run, and record peak GPU memory. A table goes to stdout and every row, failures
included (status build_error / launch_error / wrong), to RESULTS.json. The exit status is
1 when any variant is wrong or fails, else 0. Interpreter timings are never recorded:
the script refuses to run with TRITON_INTERPRET set.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

Ref = Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]]

MM_KNOBS = [
    {"block_m": 128, "block_n": 128, "block_k": 64, "num_warps": 8, "num_stages": 3, "group_m": 8},
    {"block_m": 128, "block_n": 256, "block_k": 64, "num_warps": 8, "num_stages": 3, "group_m": 8},
    {"block_m": 64, "block_n": 128, "block_k": 64, "num_warps": 4, "num_stages": 4, "group_m": 8},
    {"block_m": 128, "block_n": 128, "block_k": 32, "num_warps": 4, "num_stages": 4, "group_m": 4},
]
ROW_KNOBS = [{"block": 4096, "num_warps": 8}, {"block": 1024, "num_warps": 4}, {"block": 2048, "num_warps": 16}]
EW_KNOBS = [{"block": 1024, "num_warps": 4}, {"block": 4096, "num_warps": 8}]
# max |out - ref| / max |ref| allowed, by output dtype (ref computed in f32 from the same inputs)
REL_TOL = {"f16": 1e-2, "bf16": 3e-2, "f32": 1e-4, "f64": 1e-9}


@dataclass
class Case:
    label: str
    programs: list  # one program, or the pieces of a decision run in order
    sizes: dict[str, int]
    knobs: list[list[dict[str, object]]]  # per variant, knobs for each program
    reference: Ref  # torch result of the outputs checked, from the inputs
    baseline: Ref  # torch eager doing the same job (timed)
    flops: float = 0.0
    moved_bytes: float = 0.0
    notes: dict[str, object] = field(default_factory=dict)


def _d(x: torch.Tensor) -> torch.Tensor:
    return x.float()


def build_cases(quick: bool, smoke: bool = False) -> list[Case]:
    """The cases at serving sizes, or (smoke) at tiny sizes that the interpreter runs in seconds."""
    from emmy_core.graph.decisions import split_k, split_rows
    from emmy_core.ir.builders import Dim, elementwise, layernorm, matmul, rmsnorm, softmax

    mmk = MM_KNOBS[:2] if quick else MM_KNOBS
    rk = ROW_KNOBS[:2] if quick else ROW_KNOBS
    ek = EW_KNOBS
    if smoke:
        mmk = [{"block_m": 16, "block_n": 32, "block_k": 16}, {"block_m": 32, "block_n": 16, "block_k": 32}]
        rk, ek = [{"block": 32}, {"block": 128}], [{"block": 64}]
    # sizes: serving, or smoke
    m, n, k, ffn = (33, 48, 64, 80) if smoke else (4096, 4096, 4096, 11008)
    s_len, heads, hd = (19, 2, 32) if smoke else (2048, 16, 64)
    sk_m, sk_k = (17, 128) if smoke else (128, 16384)
    rows, hidden, long_h = (5, 100, 256) if smoke else (8192, 4096, 65536)
    cases: list[Case] = []
    cases.append(Case(
        f"matmul f16 {m}x{n}x{k} +bias gelu", [matmul(Dim("T", m), n, k, epilogue=("bias", "gelu"))],
        {"T": m}, [[kn] for kn in mmk],
        lambda i: {"y": F.gelu(_d(i["a"]) @ _d(i["b"]) + _d(i["bias"]))},
        lambda i: {"y": F.gelu(i["a"] @ i["b"] + i["bias"])},
        flops=2.0 * m * n * k,
    ))
    cases.append(Case(
        f"matmul f16 gate-up silu*mul {m}x{ffn}x{k}", [matmul(Dim("T", m), ffn, k, epilogue=("silu", "mul"))],
        {"T": m}, [[kn] for kn in mmk[:2]],
        lambda i: {"y": F.silu(_d(i["a"]) @ _d(i["b"])) * _d(i["gate"])},
        lambda i: {"y": F.silu(i["a"] @ i["b"]) * i["gate"]},
        flops=2.0 * m * ffn * k,
    ))
    att = matmul(Dim("S", s_len), Dim("S", s_len), Dim("D", extent=hd), batch=(Dim("B", 4), Dim("NH", extent=heads)),
                 b_transposed=True, epilogue=("scale:0.125",))
    att_knobs = mmk[:1] if smoke else [
        {"block_m": 128, "block_n": 128, "block_k": 64, "num_warps": 8, "num_stages": 3},
        {"block_m": 128, "block_n": 64, "block_k": 64, "num_warps": 4, "num_stages": 3},
    ]
    cases.append(Case(
        f"attention scores f16 4x{heads}x{s_len}x{s_len}x{hd}", [att], {"S": s_len, "B": 4}, [[kn] for kn in att_knobs],
        lambda i: {"y": (_d(i["a"]) @ _d(i["b"]).transpose(-1, -2)) * 0.125},
        lambda i: {"y": (i["a"] @ i["b"].transpose(-1, -2)) * 0.125},
        flops=2.0 * 4 * heads * s_len * s_len * hd,
    ))
    small_m = matmul(Dim("T", sk_m), n, sk_k, epilogue=("bias",))
    sk_knobs = mmk[0] if smoke else {"block_m": 64, "block_n": 128, "block_k": 64, "num_warps": 4, "num_stages": 4}
    for label, programs, knobs in (
        ("whole", [small_m], [sk_knobs]),
        ("split:K=8", list(split_k(small_m, 8).pieces), [sk_knobs, ek[0]]),
    ):
        cases.append(Case(
            f"matmul f16 {sk_m}x{n}x{sk_k} +bias, {label}", programs, {"T": sk_m}, [knobs],
            lambda i: {"y": _d(i["a"]) @ _d(i["b"]) + _d(i["bias"])},
            lambda i: {"y": i["a"] @ i["b"] + i["bias"]},
            flops=2.0 * sk_m * n * sk_k,
        ))

    def rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        x = _d(x)
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * _d(w)

    def rms_eager(i: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        h = i["x"] + i["res"]
        return {"h": h, "y": F.rms_norm(h, (hidden,), i["w"], 1e-6)}

    cases.append(Case(
        f"rmsnorm f16 {rows}x{hidden} +residual",
        [rmsnorm(hidden, dtype="f16", batch_hint=rows, prologue=("residual",))],
        {"B": rows}, [[kn] for kn in rk],
        lambda i: {"h": _d(i["x"] + i["res"]), "y": rms(i["x"] + i["res"], i["w"])}, rms_eager,
        moved_bytes=2.0 * rows * hidden * 4,
    ))
    long_rows = rmsnorm(long_h, dtype="f16", batch_hint=64)
    long_knobs = rk[0] if smoke else {"block": 4096, "num_warps": 8}
    for label, programs, knobs in (
        ("whole", [long_rows], [long_knobs]),
        ("split:H=8", list(split_rows(long_rows, 8).pieces), [long_knobs, long_knobs]),
    ):
        cases.append(Case(
            f"rmsnorm f16 64x{long_h}, {label}", programs, {"B": 64}, [knobs],
            lambda i: {"y": rms(i["x"], i["w"])}, lambda i: {"y": F.rms_norm(i["x"], (long_h,), i["w"], 1e-6)},
            moved_bytes=2.0 * 64 * long_h * 2,
        ))
    for dt in ("f32", "f16"):
        cases.append(Case(
            f"softmax {dt} {rows}x{hidden}", [softmax(hidden, dtype=dt, batch_hint=rows)], {"B": rows},
            [[kn] for kn in rk],
            lambda i: {"y": torch.softmax(_d(i["x"]), -1)}, lambda i: {"y": torch.softmax(i["x"], -1)},
            moved_bytes=2.0 * rows * hidden * (4 if dt == "f32" else 2),
        ))
    cases.append(Case(
        f"layernorm f16 {rows}x{hidden}", [layernorm(hidden, dtype="f16", batch_hint=rows)], {"B": rows},
        [[kn] for kn in rk],
        lambda i: {"y": F.layer_norm(_d(i["x"]), (hidden,), _d(i["w"]), _d(i["bias"]), 1e-5)},
        lambda i: {"y": F.layer_norm(i["x"], (hidden,), i["w"], i["bias"], 1e-5)},
        moved_bytes=2.0 * rows * hidden * 2,
    ))
    cases.append(Case(
        f"elementwise f16 silu(a)*b {rows}x{ffn}",
        [elementwise("silu(a)*b", dtype="f16", batch_hint=rows, cols=ffn)], {"B": rows}, [[kn] for kn in ek],
        lambda i: {"y": F.silu(_d(i["a"])) * _d(i["b"])}, lambda i: {"y": F.silu(i["a"]) * i["b"]},
        moved_bytes=3.0 * rows * ffn * 2,
    ))
    cases.append(Case(
        f"elementwise f32 gelu_tanh(a)+b*c {rows}x{hidden}",
        [elementwise("gelu_tanh(a) + b*c", dtype="f32", batch_hint=rows, cols=hidden)], {"B": rows},
        [[kn] for kn in ek],
        lambda i: {"y": F.gelu(i["a"], approximate="tanh") + i["b"] * i["c"]},
        lambda i: {"y": F.gelu(i["a"], approximate="tanh") + i["b"] * i["c"]},
        moved_bytes=4.0 * rows * hidden * 4,
    ))
    return cases


def tensors(case: Case, seed: int, device: str) -> dict[str, torch.Tensor]:
    """Fresh random inputs on the GPU for every buffer a program reads that no earlier piece writes."""
    from emmy_core.dtypes import torch_dtype
    from emmy_core.ir.sizes import extents

    gen = torch.Generator(device=device).manual_seed(seed)
    env: dict[str, torch.Tensor] = {}
    written: set[str] = set()
    for p in case.programs:
        ext = extents(p, {k: v for k, v in case.sizes.items() if k in {a.name for a in p.dynamic_axes}})
        for b in p.inputs:
            if b.name not in env and b.name not in written:
                shape = [ext[a] for a in b.shape]
                scale = 1.0 / math.sqrt(ext[b.shape[-1]]) if b.name in ("a", "b") else 1.0
                env[b.name] = (torch.randn(shape, generator=gen, device=device) * scale).to(
                    torch_dtype(b.dtype))
        written |= {b.name for b in p.outputs}
    return env


def run_variant(case: Case, knobs: list[dict[str, object]], env: dict[str, torch.Tensor],
                timed: bool = True) -> dict[str, object]:
    """Builds, runs, checks and (timed) times one variant; failures come back as rows with a status."""
    from emmy_core.codegen.backend import BuildError, LaunchError
    from emmy_core.codegen.triton_gen import TritonBackend
    from emmy_core.dtypes import torch_dtype
    from emmy_core.ir.sizes import extents

    row: dict[str, object] = {"case": case.label, "knobs": knobs, "sizes": case.sizes}
    backend = TritonBackend()
    launches: list[Callable[[], None]] = []
    bufs_all = dict(env)
    device = next(iter(env.values())).device
    cuda = device.type == "cuda"
    t0 = time.perf_counter()
    try:  # build and first run; failures are rows, never a stopped run
        for p, kn in zip(case.programs, knobs, strict=True):
            dyn = {a.name for a in p.dynamic_axes}
            sz = {k: v for k, v in case.sizes.items() if k in dyn}
            ext = extents(p, sz)
            for b in p.outputs:
                bufs_all[b.name] = torch.full([ext[a] for a in b.shape], float("nan"), device=device,
                                              dtype=torch_dtype(b.dtype))
            built = backend.build(p, kn, "deploy")
            launches.append(built.prepare({b.name: bufs_all[b.name] for b in p.buffers}, sz))
        for launch in launches:  # first run compiles
            launch()
        if cuda:
            torch.cuda.synchronize()
    except BuildError as exc:
        return {**row, "status": "build_error", "error": str(exc)[:1000]}
    except LaunchError as exc:
        return {**row, "status": "launch_error", "error": str(exc)[:1000]}
    except Exception as exc:  # anything else is this variant's failure too, recorded, and the run goes on
        return {**row, "status": "crash", "error": f"{type(exc).__name__}: {exc}"[:1000]}
    row["build_and_first_run_s"] = round(time.perf_counter() - t0, 3)
    want = case.reference(env)
    worst = 0.0
    for name, ref in want.items():
        got = bufs_all[name].float()
        if torch.isnan(got).any():
            return {**row, "status": "wrong", "error": f"{name}: NaN left in the output (never written)"}
        err = float((got - ref.float()).abs().max() / ref.float().abs().max().clamp_min(1e-30))
        worst = max(worst, err)
        dtype = next(b.dtype for p in case.programs for b in p.outputs if b.name == name)
        if err > REL_TOL[dtype]:
            return {**row, "status": "wrong", "max_rel_err": err, "error": f"{name}: max rel err {err:.3g}"}
    row["max_rel_err"] = worst
    del want, got, ref  # peak memory below counts the kernels' own buffers, not the reference
    if not timed:
        case.baseline(env)  # the eager baseline runs too (a smoke run checks the script, not speed)
        return {**row, "status": "ok"}
    from triton.testing import do_bench

    def ours() -> None:
        for launch in launches:
            launch()

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    row["ms"] = do_bench(ours, warmup=25, rep=100, return_mode="median")
    row["peak_mem_bytes"] = torch.cuda.max_memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    row["torch_ms"] = do_bench(lambda: case.baseline(env), warmup=25, rep=100, return_mode="median")
    row["torch_peak_mem_bytes"] = torch.cuda.max_memory_allocated()
    row["speedup_vs_torch"] = row["torch_ms"] / row["ms"]  # type: ignore[operator]
    if case.flops:
        row["tflops"] = case.flops / (row["ms"] * 1e-3) / 1e12  # type: ignore[operator]
    if case.moved_bytes:
        row["gbps"] = case.moved_bytes / (row["ms"] * 1e-3) / 1e9  # type: ignore[operator]
    row["status"] = "ok"
    return row


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="where to write the JSON results")
    ap.add_argument("--quick", action="store_true", help="fewer knob settings per case")
    ap.add_argument("--only", action="append", default=[],
                    help="run only cases whose label contains this text (repeatable: any of them)")
    ap.add_argument("--smoke", action="store_true",
                    help="no GPU: tiny sizes on CPU under Triton's interpreter, correctness only, no timings")
    args = ap.parse_args(argv)
    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"  # before any kernel is defined
    elif os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        print("TRITON_INTERPRET is set: interpreter timings are never recorded; unset it", file=sys.stderr)
        return 2
    elif not torch.cuda.is_available():
        print("no CUDA GPU visible to torch (--smoke checks the script on CPU)", file=sys.stderr)
        return 2
    import triton

    torch.backends.cuda.matmul.allow_tf32 = False  # references in true f32
    rows = []
    failed = 0
    print(f"{'case':48} {'knobs':44} {'status':8} {'ms':>8} {'torch':>8} {'x':>6} {'TF/s|GB/s':>9} {'err':>8}")
    device = "cpu" if args.smoke else "cuda"
    for case in build_cases(args.quick, smoke=args.smoke):
        if args.only and not any(text in case.label for text in args.only):
            continue
        env = tensors(case, seed=len(rows) + 1, device=device)
        for knobs in case.knobs:
            row = run_variant(case, knobs, env, timed=not args.smoke)
            rows.append(row)
            failed += row["status"] != "ok"
            kt = ";".join(",".join(f"{k}={v}" for k, v in sorted(kn.items())) for kn in knobs)
            kt = kt.replace("block_", "b").replace("num_warps", "w").replace("num_stages", "s").replace("group_m", "g")
            if row["status"] == "ok" and args.smoke:
                print(f"{case.label[:48]:48} {kt[:44]:44} {'ok':8} {'-':>8} {'-':>8} {'-':>6} {'-':>9} "
                      f"{row['max_rel_err']:8.1e}", flush=True)
            elif row["status"] == "ok":
                rate = row.get("tflops", row.get("gbps", 0.0))
                print(f"{case.label[:48]:48} {kt[:44]:44} {'ok':8} {row['ms']:8.4f} {row['torch_ms']:8.4f} "
                      f"{row['speedup_vs_torch']:6.2f} {rate:9.1f} {row['max_rel_err']:8.1e}", flush=True)
            else:
                print(f"{case.label[:48]:48} {kt[:44]:44} {row['status']:8} {row.get('error', '')[:200]}", flush=True)
        del env
        if not args.smoke:
            torch.cuda.empty_cache()
    result = {
        "device": "cpu (interpreter smoke run)" if args.smoke else torch.cuda.get_device_name(),
        "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
        "smoke": args.smoke, "rows": rows, "failed": failed,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(args.out.suffix + ".tmp")
    tmp.write_text(json.dumps(result, indent=1, sort_keys=True))
    tmp.replace(args.out)
    print(f"{len(rows)} variants, {failed} failed; results in {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
