"""On a real GPU: the static limits agree with what Triton's compiler does on this card.

A plain Triton matmul (the tutorial's grouped kernel, the shape the shared-memory
estimate models) is compiled for a seeded sample of the local card's candidates and for
options built to exceed the card's shared memory. Every option the rule calls valid
must compile and launch; every option refused for shared memory must be refused by the
compiler too. The estimate against the compiler's own shared-memory figure and the
spill counts are written to $EMMY_GPU_REPORT when set (figures, not assertions).
"""

from __future__ import annotations

import json
import os

import pytest

from emmy_core.dtypes import torch_dtype
from emmy_core.ir.builders import Dim, matmul
from emmy_core.knobs import candidate_options, option_problem, sample_candidates
from emmy_core.targets import resolve_card

pytestmark = pytest.mark.gpu


def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def mm(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
           GROUP_M: tl.constexpr, ACC16: tl.constexpr, IEEE: tl.constexpr):
        pid = tl.program_id(0)
        num_pid_m = tl.cdiv(M, BLOCK_M)
        num_pid_n = tl.cdiv(N, BLOCK_N)
        group = GROUP_M * num_pid_n
        first_m = (pid // group) * GROUP_M
        size_m = tl.minimum(num_pid_m - first_m, GROUP_M)
        pid_m = first_m + (pid % group) % size_m
        pid_n = (pid % group) // size_m
        rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
        rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
        rk = tl.arange(0, BLOCK_K)
        a = a_ptr + rm[:, None] * K + rk[None, :]
        b = b_ptr + rk[:, None] * N + rn[None, :]
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float16 if ACC16 else tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            x = tl.load(a, mask=rk[None, :] < K - k * BLOCK_K, other=0.0)
            y = tl.load(b, mask=rk[:, None] < K - k * BLOCK_K, other=0.0)
            if ACC16:
                acc = tl.dot(x, y, acc, out_dtype=tl.float16)
            elif IEEE:
                acc = tl.dot(x, y, acc, input_precision="ieee")
            else:
                acc = tl.dot(x, y, acc)
            a += BLOCK_K
            b += BLOCK_K * N
        cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        tl.store(c_ptr + cm[:, None] * N + cn[None, :], acc.to(c_ptr.dtype.element_ty),
                 mask=(cm[:, None] < M) & (cn[None, :] < N))

    return mm


def _compile(mm, knobs: dict, dtype: str) -> dict:
    import torch
    import triton
    from triton.runtime.errors import OutOfResources

    t = torch_dtype(dtype)
    M = N = K = 512
    a = torch.randn(M, K, device="cuda", dtype=t)
    b = torch.randn(K, N, device="cuda", dtype=t)
    c = torch.empty(M, N, device="cuda", dtype=t)
    grid = (triton.cdiv(M, knobs["block_m"]) * triton.cdiv(N, knobs["block_n"]),)
    try:
        k = mm[grid](a, b, c, M, N, K, BLOCK_M=knobs["block_m"], BLOCK_N=knobs["block_n"],
                     BLOCK_K=knobs["block_k"], GROUP_M=knobs["group_m"], ACC16=knobs.get("acc") == "f16",
                     IEEE=dtype == "f32", num_warps=knobs["num_warps"], num_stages=knobs["num_stages"])
        torch.cuda.synchronize()
    except OutOfResources as exc:
        return {"ok": False, "error": f"OutOfResources: {exc}"[:200]}
    return {"ok": True, "shared": int(k.metadata.shared), "regs": int(k.n_regs), "spills": int(k.n_spills)}


def _estimate(knobs: dict, width: int) -> int:
    return knobs["num_stages"] * (knobs["block_m"] + knobs["block_n"]) * knobs["block_k"] * width


def test_static_limits_agree_with_the_compiler_on_this_card() -> None:
    card = resolve_card()
    mm = _kernel()
    results = []
    f16 = matmul(Dim("T", 4096), 4096, 4096)
    f32 = matmul(Dim("T", 4096), 4096, 4096, dtype="f32")
    cases = [(f16, "f16", o) for o in sample_candidates(f16, card, 24, seed=11)]
    f32_opts = candidate_options(f32, card)
    refused = [o.knobs for o in f32_opts if o.problem and "shared memory" in o.problem][:6]
    refused += [o.knobs for o in f32_opts if o.problem and "would spill" in o.problem][:4]
    cases += [(f32, "f32", o) for o in sample_candidates(f32, card, 8, seed=5)] + [(f32, "f32", o) for o in refused]
    over = {"block_m": 256, "block_n": 128, "block_k": 128, "num_warps": 8, "num_stages": 4, "group_m": 8,
            "acc": "f32"}  # 4 x 96 KiB of f16 tiles: more than any card's shared memory
    cases += [(f16, "f16", over), (f16, "f16", {**over, "num_stages": 2})]
    for kernel, dtype, knobs in cases:
        problem = option_problem(kernel, card, knobs)
        got = _compile(mm, knobs, dtype)
        results.append({"knobs": knobs, "dtype": dtype, "problem": problem,
                        "estimate": _estimate(knobs, 2 if dtype == "f16" else 4), **got})
    if os.environ.get("EMMY_GPU_REPORT"):
        with open(os.environ["EMMY_GPU_REPORT"], "w") as f:
            json.dump({"card": card.name, "results": results}, f, indent=1)
    for r in results:
        if r["problem"] is None:
            assert r["ok"], r
        elif "shared memory" in r["problem"]:
            assert not r["ok"], r
    assert any(r["problem"] and "shared memory" in r["problem"] for r in results)


def test_local_card_matches_the_devices_properties() -> None:
    import torch

    card = resolve_card()
    props = torch.cuda.get_device_properties()
    assert card.name == torch.cuda.get_device_name()
    assert card.sms == props.multi_processor_count
    assert card.regs_per_sm == props.regs_per_multiprocessor
    assert card.max_threads_per_sm == props.max_threads_per_multi_processor
    assert card.smem_per_block_kib * 1024 == props.shared_memory_per_block_optin
    assert card.smem_per_sm_kib * 1024 == props.shared_memory_per_multiprocessor
    assert card.l2_mib * 1024 * 1024 == props.L2_cache_size
    assert abs(card.mem_gb * 1e9 - props.total_memory) < 0.1 * props.total_memory
    assert (card.cc or (0, 0)) == (props.major, props.minor)
