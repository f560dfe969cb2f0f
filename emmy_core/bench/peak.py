"""The f32 FMA rate this machine sustains, measured: what a benchmark's "share of peak" should be a share of
(and the bf16 rate of `vdpbf16ps`, where the CPU has AVX512-BF16: what a `dot=dpbf16` product's share is of;
and the memory's read rate, what a decode product's is of).

The nominal peak (cores x the clock cpuinfo reports x the FMA pipes, `targets.cpu.fma_pipes`) misses a clock
that boosts above the reported one: on a Zen 4 EPYC it is 166 GFLOP/s on 2 cores, the measured rate 230, and
Emmy's matmuls had read as 120-134% "of peak". A small C program runs independent FMA chains on every thread,
built with the system compiler (as Emmy's CPU kernels are).
"""

from __future__ import annotations

import math
import subprocess
import tempfile
import time
from pathlib import Path

_FMA_PEAK_C = r"""
#include <omp.h>
#include <stdio.h>
#include <time.h>
typedef float vf __attribute__((vector_size(VBYTES)));
int main(void) {
    const long iters = ITERS;
    double best = 0.0;
    for (int rep = 0; rep < 3; ++rep) {
        struct timespec t0, t1;
        float sink = 0.0f;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        #pragma omp parallel num_threads(THREADS) reduction(+:sink)
        {
            vf a[CHAINS], x, y;
            for (int i = 0; i < (int)(VBYTES / 4); ++i) { x[i] = 1.0f + 1e-7f * i; y[i] = 0.999999f; }
            for (int c = 0; c < CHAINS; ++c) a[c] = x * (float)(c + 1);
            for (long it = 0; it < iters; ++it) {
                #pragma GCC unroll 16
                for (int c = 0; c < CHAINS; ++c) a[c] = a[c] * y + x;  /* one FMA per lane */
            }
            for (int c = 0; c < CHAINS; ++c) sink += a[c][0];
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double s = (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
        double gf = 2.0 * THREADS * iters * CHAINS * (VBYTES / 4) / s / 1e9;
        if (gf > best) best = gf;
        if (sink == 1234.5f) printf("#");
    }
    printf("%.1f\n", best);
    return 0;
}
"""


_DPBF16_PEAK_C = r"""
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <time.h>
__attribute__((target("avx512f,avx512bf16"))) static double run(long iters) {
    float sink = 0.0f;
    #pragma omp parallel num_threads(THREADS) reduction(+:sink)
    {
        __m512 a[CHAINS];
        const __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80), y = (__m512bh)_mm512_set1_epi32(0x3f7f3f7f);
        for (int c = 0; c < CHAINS; ++c) a[c] = _mm512_set1_ps((float)c);
        for (long it = 0; it < iters; ++it) {
            #pragma GCC unroll 16
            for (int c = 0; c < CHAINS; ++c) a[c] = _mm512_dpbf16_ps(a[c], x, y);  /* 16 lanes x 2 products */
        }
        for (int c = 0; c < CHAINS; ++c) sink += _mm512_reduce_add_ps(a[c]);
    }
    return (double)sink;
}
int main(void) {
    const long iters = ITERS;
    double best = 0.0;
    for (int rep = 0; rep < 3; ++rep) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        double sink = run(iters);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double s = (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
        double gf = 64.0 * THREADS * iters * CHAINS / s / 1e9;
        if (gf > best) best = gf;
        if (sink == 1234.5) printf("#");
    }
    printf("%.1f\n", best);
    return 0;
}
"""


def _run(source: str, defs: list[str]) -> float | None:
    """Builds `source` with the system compiler and `defs`, runs it, and reads the rate it prints (None where the
    compiler or the run fails: a CPU without the instruction stops the run)."""
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "peak.c", Path(tmp) / "peak"
        src.write_text(source)
        try:
            subprocess.run(["cc", "-O3", "-march=native", "-ffp-contract=fast", "-fopenmp", *defs, str(src), "-o",
                            str(exe)], check=True, capture_output=True, timeout=60)
            out = subprocess.run([str(exe)], check=True, capture_output=True, text=True, timeout=60)
            return float(out.stdout.strip().lstrip("#"))
        except (OSError, subprocess.SubprocessError, ValueError):
            return None


def measured_dpbf16_peak(threads: int) -> float | None:
    """The bf16 rate of AVX512-BF16's `vdpbf16ps` on `threads` (GFLOP/s, 64 a 512-bit instruction): 16 independent
    chains per thread, as `measured_fma_peak`. What a bf16 product on `dot=dpbf16` can reach; None where the
    compiler or the CPU lacks the instruction."""
    return _run(_DPBF16_PEAK_C, ["-DCHAINS=16", f"-DTHREADS={threads}", "-DITERS=2000000"])


def measured_fma_peak(threads: int, simd_bits: int) -> float | None:
    """The f32 FMA rate this machine sustains on `threads` (GFLOP/s): 16 independent chains of `simd_bits`-wide
    FMAs per thread, built with the system compiler, best of 3 runs of about a tenth of a second. The nominal
    peak (cores x cpuinfo's clock x the FMA pipes) misses a clock that boosts above the one the CPU reports
    (a Zen 4 EPYC's matmuls ran at 120-134% of it). None where the compiler or the run fails."""
    return _run(_FMA_PEAK_C, [f"-DVBYTES={max(16, simd_bits // 8)}", "-DCHAINS=16", f"-DTHREADS={threads}",
                              "-DITERS=4000000"])


def memory_bandwidth(mib: int) -> float:
    """GB/s of a read (torch's `Tensor.sum`, on the threads torch is set to) over `mib` MiB of f32, the best of five: what a
    decode product streaming its weights from memory is measured against."""
    import torch

    x = torch.ones(mib * 2**20 // 4)
    best = math.inf
    for _ in range(5):
        t0 = time.perf_counter_ns()
        x.sum()
        best = min(best, time.perf_counter_ns() - t0)
    return mib * 2**20 / best
