"""A tune with the prior's order measures first what suits the sizes (`knobs.parallel.suited`): at a few rows the
streaming options of one pass over B, which the prior never saw measured and would rank among the computing ones."""

from __future__ import annotations

from emmy_core.ir.builders import Dim, matmul
from emmy_core.knobs import candidates
from emmy_core.prior import load_installed_prior
from emmy_core.search.replay import Session
from emmy_core.search.strategy import make_strategy
from emmy_core.search.tune import card_pool
from emmy_core.targets import Card

ZEN4 = Card("AMD EPYC (family 25 model 17 stepping 1) AVX-512 x2", "cpu", "x86_64", "", ("avx512_bf16",),
            "test card", cores=2, simd_bits=512, l1d_kib=32.0, l2_kib=1024.0, l3_kib=32768.0, freq_mhz=2596.0)


def picks(dtype: str, t: int, n: int = 4) -> list[dict[str, object]]:
    kernel = matmul(Dim("T", 16), 5632, 2048, dtype=dtype, b_transposed=True)
    knobs = [dict(k) for k in candidates(kernel, ZEN4)]
    session = Session(make_strategy("prior", 0), card_pool(load_installed_prior(), kernel, {"T": t}, ZEN4, "deploy",
                                                           knobs, 0, ""), n)
    out = []
    while len(out) < n and (got := session.next(1)):
        out.append(knobs[got[0]])
        session.tell(got[0], 100.0 + len(out))
    return out


def test_a_tune_at_a_few_rows_measures_the_streaming_options_of_one_pass_right_after_the_first() -> None:
    for dtype in ("f32", "bf16"):
        for t in (1, 8, 16):
            first, *rest = picks(dtype, t)
            assert "prefetch_l2" not in first  # the rule's first option (a dynamic M's: it computes)
            assert rest and all("prefetch_l2" in k and k["unroll"] == t for k in rest), (dtype, t, rest)
        assert not any("prefetch_l2" in k for k in picks(dtype, 128))
