"""The probe's matrix instructions: read from the flags, AMX only with the OS's permission, the card's
`tensor_cores` and never its name (which keys the freezes measured before they were read)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emmy_core.targets import probe_cpu
from emmy_core.targets.cpu import (
    CPU_MATRIX_INSTRUCTIONS,
    amx_permission,
    cpu_flags,
    isa_features,
    matrix_instructions,
    parse_cpuinfo,
    probe_isa,
)
from emmy_core.targets.table import CardTableError, load_table

SPR = ("fpu sse2 avx fma f16c avx2 avx512f avx512bw avx512vl avx512_vnni avx512_bf16 avx_vnni avx512_fp16 "
       "amx_bf16 amx_tile amx_int8")
ZEN4 = "fpu sse2 avx fma f16c avx2 avx512f avx512bw avx512vl avx512_bf16 avx512_vnni"
FREEZES = Path(__file__).resolve().parents[2] / "freezes"


def test_matrix_instructions_come_from_the_flags_and_amx_needs_the_os() -> None:
    assert matrix_instructions(SPR, amx_permitted=True) == CPU_MATRIX_INSTRUCTIONS
    assert matrix_instructions(SPR, amx_permitted=False) == ("avx512_bf16", "avx512_fp16", "avx_vnni")
    assert matrix_instructions(ZEN4, amx_permitted=True) == ("avx512_bf16",)
    assert matrix_instructions("fpu sse2 avx2 amx_bf16", amx_permitted=True) == ()  # no tiles, no AMX
    spr = isa_features(SPR, amx_permitted=True)
    assert (spr.avx512bf16, spr.avx512fp16, spr.avx_vnni, spr.amx_tile, spr.amx_bf16, spr.amx_int8) == (True,) * 6
    assert spr.matrix == CPU_MATRIX_INSTRUCTIONS and isa_features(SPR).matrix[-1] == "avx_vnni"


def test_this_machine_lists_what_its_flags_and_os_allow_and_keeps_its_name() -> None:
    card, isa = probe_cpu(), probe_isa()
    info = parse_cpuinfo(Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else "")
    assert card.tensor_cores == isa.matrix == matrix_instructions(cpu_flags(info), amx_permission())
    assert not any(word in card.name for word in ("AMX", "BF16", "amx", "bf16"))  # facts of the description
    if "amx_bf16" in card.tensor_cores:
        assert amx_permission()  # asked once, granted: a kernel on tiles may run in this process


def test_the_shipped_freeze_of_this_xeon_keeps_its_file_and_name() -> None:
    """The Xeon with AMX this was built on: its name (and so its freeze's file) is what it was before the probe
    read matrix instructions."""
    path = FREEZES / "intel-r-xeon-r-processor-family-6-model-167-stepping-1-avx-512-x2.json"
    if not path.is_file():
        pytest.skip("the repository's freeze of the Xeon (family 6 model 167) is not here")
    head = path.read_text(encoding="utf-8").split("\n", 2)[1]
    assert json.loads(head.removeprefix('"card":').rstrip(",'"))["name"] == \
        "Intel(R) Xeon(R) Processor (family 6 model 167 stepping 1) AVX-512 x2"


def test_a_user_cpu_card_may_list_matrix_instructions_but_not_a_gpus(tmp_path: Path) -> None:
    entry = {"name": "Some Xeon AVX-512 x4", "target": "cpu", "arch": "x86_64", "compute_capability": "",
             "tensor_cores": ["avx512_bf16", "amx_bf16"], "cores": 4, "l1d_kib": 48, "l2_kib": 2048, "l3_kib": None,
             "simd_bits": 512, "freq_mhz": None, "source": "test"}
    path = tmp_path / "cards.json"
    path.write_text(json.dumps({"format": "emmy-gpu-table", "version": 1, "cards": [entry]}))
    assert load_table(path)["Some Xeon AVX-512 x4"].tensor_cores == ("avx512_bf16", "amx_bf16")
    path.write_text(json.dumps({"format": "emmy-gpu-table", "version": 1,
                                "cards": [{**entry, "tensor_cores": ["mma_m16n8k16"]}]}))
    with pytest.raises(CardTableError, match="not a CPU matrix instruction"):
        load_table(path)
