"""The feature function: hardware, regime, structure and candidate groups; missing is NaN, never zero;
one function for the fit and the compile; and the seed's rule on features constant across a fork."""

from __future__ import annotations

import numpy as np
import pytest

from emmy_core.ir import Extern
from emmy_core.ir.builders import matmul, rmsnorm
from emmy_core.knobs import candidates
from emmy_core.prior import fork_features
from emmy_core.prior.training import Params, Rows, train
from emmy_core.targets import load_table

H200 = load_table()["NVIDIA H200"]


def _col(rows, name: str) -> np.ndarray:
    return rows.values[:, rows.names.index(name)]


def test_a_knob_a_candidate_has_not_decided_is_missing_not_zero() -> None:
    kernel = matmul(256, 256, 256)
    pool = list(candidates(kernel, H200))
    assert "mma" not in pool[0]  # the first option leaves the instruction to the compiler
    pool.append({**pool[1], "mma": "none"})
    rows = fork_features(kernel, {}, H200, "deploy", pool)
    assert np.isnan(_col(rows, "k.mma_none")[0]) and np.isnan(_col(rows, "k.mma_m")[0])
    assert _col(rows, "k.mma_none")[-1] == 1.0  # decided: no tensor core (plain FMA), a different fact
    assert np.isnan(_col(rows, "k.tile_m")).all()  # a CPU knob no GPU candidate decides
    wg = [i for i, c in enumerate(pool) if str(c.get("mma", "")).startswith("wgmma_m64n")]
    assert wg and (_col(rows, "k.mma_m")[wg] == 64).all() and (_col(rows, "k.mma_async")[wg] == 1).all()


def test_a_card_described_nowhere_has_every_hardware_feature_missing() -> None:
    kernel = rmsnorm(1024)
    pool = candidates(kernel, H200)
    rows = fork_features(kernel, "B=8", None, "deploy", pool)
    hw = [i for i, n in enumerate(rows.names) if n.startswith("hw.")]
    assert hw and np.isnan(rows.values[:, hw]).all()
    assert np.isnan(_col(rows, "g.resident")).all() and not np.isnan(_col(rows, "g.tile_area")).any()


def test_structure_is_computed_from_the_program_at_the_benched_sizes() -> None:
    kernel = rmsnorm(1024)
    pool = candidates(kernel, H200)[:3]
    small, big = (fork_features(kernel, s, H200, "rank", pool) for s in ("B=8", {"B": 512}))
    assert _col(big, "st.log2_bytes")[0] > _col(small, "st.log2_bytes")[0]
    assert _col(small, "st.log2_rows")[0] == 3.0 and _col(small, "setting.rank")[0] == 1.0
    np.testing.assert_array_equal(fork_features(kernel, "B=8", H200, "rank", pool).values, small.values)


def test_extern_kernels_are_featurised_from_name_problem_and_knobs() -> None:
    kernel = Extern("convolution_kernel", (4096, 4096), "0" * 64)
    pool = [{"extern.block_size_x": 32, "extern.block_size_y": 4, "extern.tile_size_x": 2, "extern.mode": "a"},
            {"extern.block_size_x": 64, "extern.block_size_y": 2}]
    rows = fork_features(kernel, "", load_table()["NVIDIA RTX A4000"], "deploy", pool)
    assert _col(rows, "st.log2_p0")[0] == 12.0 and 0 <= _col(rows, "st.name_code")[0] < 1
    assert list(_col(rows, "x.block_size_x")) == [32.0, 64.0] and np.isnan(_col(rows, "x.tile_size_x")[1])
    assert list(_col(rows, "g.threads")) == [128.0, 128.0]  # Kernel Tuner's block_size_x * block_size_y
    assert 0 <= _col(rows, "x.mode")[0] < 1 and np.isnan(_col(rows, "x.mode")[1])


def test_a_feature_constant_across_a_forks_candidates_cannot_influence_that_fork_by_itself() -> None:
    """Seed 08: hardware, regime and structure are the same for every candidate of a fork, so a tree
    splitting on them alone moves every candidate's score by the same amount. Shown on a constructed
    pool: a ranker trained where the only varying features are constant within each fork leaves every
    fork's candidates tied (order: as emitted); give the candidates one feature of their own and the
    same ranker orders them."""
    kernel = matmul(256, 256, 256)
    pool = candidates(kernel, H200)[:40]
    rows = fork_features(kernel, {}, H200, "deploy", pool)
    shared = [i for i, n in enumerate(rows.names) if n.startswith(("hw.", "st.", "setting."))]
    assert np.ptp(np.nan_to_num(rows.values[:, shared], nan=-1.0), axis=0).max() == 0.0
    rng = np.random.default_rng(0)
    forks, size = 30, 12
    card = np.repeat(rng.normal(size=(forks, 3)), size, axis=0)  # constant within each fork
    own = rng.normal(size=(forks * size, 1))
    label = (own[:, 0] + 0.3 * card[:, 0] * own[:, 0] > 0).astype(float) + rng.random(forks * size) * 0.1
    group = np.repeat(np.arange(forks), size)
    constant_only = train(Rows(card, label, group), Params(iterations=40, depth=3), 0)
    scores = constant_only.predict(card).reshape(forks, size)
    assert np.ptp(scores, axis=1).max() == 0.0  # every fork's candidates tie: nothing ordered them
    both = np.hstack([card, own])
    ordered = train(Rows(both, label, group), Params(iterations=40, depth=3), 0).predict(both).reshape(forks, size)
    assert (np.ptp(ordered, axis=1) > 0).all()


@pytest.mark.parametrize("card_name", ["NVIDIA H200", "AMD Instinct MI250X"])
def test_the_compile_path_and_the_fit_build_the_same_rows(card_name: str) -> None:
    from emmy_core.prior.features import FeatureRows

    card = load_table()[card_name]
    kernel = matmul(512, 256, 1024)
    pool = candidates(kernel, card)
    rows = fork_features(kernel, {}, card, "deploy", pool)
    names = [*rows.names[::-1], "x.not_seen"]
    picked = rows.matrix(names)
    assert np.isnan(picked[:, -1]).all()
    np.testing.assert_array_equal(picked[:, :-1], rows.values[:, ::-1])
    assert isinstance(rows, FeatureRows) and rows.values.dtype == np.float64


def test_knob_columns_read_each_candidates_own_value_whether_or_not_every_candidate_sets_every_knob() -> None:
    from emmy_core.prior.geometry import knob_columns

    full = [{"tile_m": 8, "par_axis": "m", "prefetch_c": True}, {"tile_m": 16, "par_axis": "n", "prefetch_c": False}]
    ragged = [*full, {"tile_m": None, "extern.block_size_x": 32}, {"unroll": 4}]  # unset, None, an extern knob
    for pool in (full, ragged, full[:1], [{"unroll": 2}]):
        cols = knob_columns(pool)
        for i, cand in enumerate(pool):
            for key in ("tile_m", "prefetch_c", "unroll"):
                value, got = cand.get(key), cols[f"k.{key}"][i]
                assert np.isnan(got) if value is None else got == float(value), (pool, i, key)
    cols = knob_columns(ragged)
    assert cols["k.par_axis"][0] != cols["k.par_axis"][1] and np.isnan(cols["k.par_axis"][2:]).all()  # text codes
    assert cols["x.block_size_x"].tolist()[2] == 32.0 and np.isnan(cols["x.block_size_x"][[0, 1, 3]]).all()
    assert knob_columns([])["k.tile_m"].shape == (0,)


def test_the_library_route_is_a_candidate_feature_beside_emmys_knobs() -> None:
    """Issue 44: torch's own kernel is featurised (`k.library`, missing for Emmy's candidates), so the prior can
    learn where the library wins; its release is not a feature (a row of another release is never scored)."""
    from emmy_core.knobs.route import library_knobs
    from emmy_core.targets.card import Card

    cpu = Card(name="AMD EPYC 9654 AVX-512 x2", target="cpu", arch="x86_64", compute_capability="",
               tensor_cores=("avx512_bf16",), source="tests", cores=2, l1d_kib=32.0, l2_kib=1024.0,
               simd_bits=512)
    kernel = matmul(128, 2048, 2048, dtype="f32")
    pool = [library_knobs(), *list(candidates(kernel, cpu))[:3]]
    rows = fork_features(kernel, {}, cpu, "deploy", pool)
    lib = _col(rows, "k.library")
    assert not np.isnan(lib[0]) and np.isnan(lib[1:]).all()
    assert "k.library_version" not in rows.names
    assert np.isnan(_col(rows, "k.tile_m")[0]) and not np.isnan(_col(rows, "k.tile_m")[1:]).any()


@pytest.mark.parametrize(("name", "matrix", "amd", "dpbf16", "amx"), [
    ("AMD EPYC (family 25 model 17 stepping 1) AVX-512 x2", ("avx512_bf16",), 1.0, 1.0, 0.0),
    ("Intel(R) Xeon(R) Processor AVX-512 x2", ("avx512_bf16", "amx_tile", "amx_bf16"), 0.0, 1.0, 1.0),
    ("Ampere Altra x4", (), None, 0.0, 0.0),
])
def test_a_cpu_cards_vendor_and_matrix_instructions_are_hardware_features(
        name: str, matrix: tuple[str, ...], amd: float | None, dpbf16: float, amx: float) -> None:
    """Whether the library or Emmy wins turns on the CPU's maker (the libraries are tuned for their own) and
    its matrix instructions; a name that does not say the maker leaves the vendor missing."""
    from emmy_core.prior.features import hardware
    from emmy_core.targets.card import Card

    card = Card(name=name, target="cpu", arch="x86_64", compute_capability="", tensor_cores=matrix,
                source="tests", cores=2, simd_bits=512)
    hw = hardware(card)
    assert hw.get("hw.is_amd") == amd and hw["hw.has_dpbf16"] == dpbf16 and hw["hw.has_amx"] == amx
    assert hw["hw.has_fp16"] == 0.0 and hw["hw.is_cpu"] == 1.0
    assert "hw.has_dpbf16" not in hardware(H200)  # a GPU's matrix units are its own flags (hw.has_mma, ...)
