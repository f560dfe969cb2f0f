"""Naming a card: `local` (this machine's), a name from the GPU table, or this machine's CPU by name.

`resolve_card("local")` is the card this machine compiles for: its GPU when torch sees
one, else its CPU. Names are looked up in the packaged table plus the user's card file
(`$EMMY_CARDS`, see `emmy_core.targets.user_cards`). A GPU missing from the table is described from torch's device
properties (bandwidth and peak rates then unknown) with a warning saying so. Any other
name must be in the table or be this machine's own device; otherwise `UnknownCard`
lists the names Emmy knows.
"""

from __future__ import annotations

import re
import warnings

from emmy_core.targets.card import Card
from emmy_core.targets.cpu import probe_cpu
from emmy_core.targets.user_cards import known_table

LOCAL = "local"


class UnknownCard(ValueError):
    """A card name that is neither in the GPU table nor this machine's device."""


def known_cards() -> tuple[str, ...]:
    """Names of the cards in the table (and the user's card file, $EMMY_CARDS), in table order."""
    return tuple(known_table())


def card_slug(name: str) -> str:
    """File-name form of a card name: lowercase, runs of anything but [a-z0-9] become one `-`.

    `NVIDIA H200` -> `nvidia-h200`; `Intel(R) Xeon(R) Processor AVX-512 x2` -> `intel-r-xeon-r-processor-avx-512-x2`.
    """
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    if not slug:
        raise ValueError(f"card name {name[:80]!r} has no letters or digits to name a file by")
    return slug


def _arch_of(major: int, minor: int) -> str:
    return {9: "hopper", 8: "ada" if minor >= 9 else "ampere", 7: "turing" if minor >= 5 else "volta"}.get(
        major, f"sm{major}{minor}")


def card_from_properties(props: object) -> Card:
    """A card from torch.cuda.get_device_properties(): what torch knows; bandwidth and peak rates unknown."""
    name = " ".join(str(props.name).split())
    gcn = getattr(props, "gcnArchName", "") or ""
    if gcn:
        arch, cc, tcs = gcn.split(":")[0], gcn.split(":")[0], ()
    else:
        major, minor = int(props.major), int(props.minor)
        arch, cc = _arch_of(major, minor), f"{major}.{minor}"
        tcs = (("mma_m16n8k16", "wgmma_m64n64k16", "wgmma_m64n128k16") if major == 9 else
               ("mma_m16n8k16",) if major >= 8 else ("mma_m16n8k8",) if (major, minor) >= (7, 5) else ())

    def opt(attr: str, scale: float = 1.0) -> float | None:
        v = getattr(props, attr, None)
        return v / scale if isinstance(v, int | float) and not isinstance(v, bool) and v > 0 else None

    def opt_int(attr: str) -> int | None:
        v = getattr(props, attr, None)
        return int(v) if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None

    return Card(
        name=name, target="cuda", arch=arch, compute_capability=cc, tensor_cores=tcs,
        source="torch device properties (not in the GPU table: bandwidth and peak rates unknown)",
        sms=opt_int("multi_processor_count"), warp_size=opt_int("warp_size"),
        mem_gb=opt("total_memory", 1e9), smem_per_sm_kib=opt("shared_memory_per_multiprocessor", 1024),
        smem_per_block_kib=opt("shared_memory_per_block_optin", 1024),
        regs_per_sm=opt_int("regs_per_multiprocessor"), regs_per_thread=255 if not gcn else None,
        max_threads_per_block=1024, max_threads_per_sm=opt_int("max_threads_per_multi_processor"),
        l2_mib=opt("L2_cache_size", 1024 * 1024),
    )


def _local_gpu_name() -> str | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return " ".join(torch.cuda.get_device_name().split())


def local_card() -> Card:
    """This machine's card: its GPU when torch sees one, else its CPU."""
    gpu = _local_gpu_name()
    if gpu is None:
        return probe_cpu()
    table = known_table()
    if gpu in table:
        return table[gpu]
    import torch

    warnings.warn(f"GPU {gpu!r} is not in the GPU table; describing it from torch's device properties "
                  f"(bandwidth and peak rates unknown)", stacklevel=2)
    return card_from_properties(torch.cuda.get_device_properties())


def resolve_card(name: str = LOCAL) -> Card:
    """The card called `name`: `local` (this machine), a GPU of the table, or this machine's own device."""
    if not isinstance(name, str):
        raise UnknownCard(f"card name must be text, not {type(name).__name__}")
    if name == LOCAL:
        return local_card()
    table = known_table()
    if name in table:
        return table[name]
    here = local_card()
    if here.name == name:
        return here
    raise UnknownCard(f"unknown card {name[:120]!r}; known cards: {', '.join(table)}, "
                      f"and this machine's {here.name!r} (or 'local')")
