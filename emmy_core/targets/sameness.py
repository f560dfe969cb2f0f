"""One card name, one description: whether two descriptions under one name are the same hardware.

A CPU card's name (`emmy_core.targets.cpu`) carries what changes the winner, and its
description says it again in numbers: target, architecture, usable cores, SIMD width and the
caches. A file naming this machine's card but describing other hardware was measured
elsewhere under a name that now means this machine; its rows must not be read as this
machine's. The clock is left out: a VM without cpufreq reports its current clock.
"""

from __future__ import annotations

from emmy_core.targets.card import Card

IDENTITY_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("cores", "{:g} cores", "cores"), ("simd_bits", "{:g}-bit SIMD", "SIMD width"),
    ("l1d_kib", "L1d {:g} KiB", "L1d"), ("l2_kib", "L2 {:g} KiB", "L2"), ("l3_kib", "L3 {:g} KiB", "L3"),
)


def describe(card: Card) -> str:
    """The identity-bearing part of a card's description, in words (`x86_64, 2 cores, 512-bit SIMD, ...`)."""
    parts = [card.arch or card.target]
    for attr, fmt, label in IDENTITY_FIELDS:
        value = getattr(card, attr)
        parts.append(fmt.format(value) if value is not None else f"{label} unknown")
    return ", ".join(parts)


def differences(here: Card, other: Card) -> list[str]:
    """What two descriptions of one name disagree on (fields both know; an unknown number is no conflict)."""
    out = []
    if here.target != other.target:
        out.append("target")
    if here.arch and other.arch and here.arch != other.arch:
        out.append("architecture")
    for attr, _, label in IDENTITY_FIELDS:
        a, b = getattr(here, attr), getattr(other, attr)
        if a is not None and b is not None and float(a) != float(b):
            out.append(label)
    return out


def conflict(here: Card, other: Card, whose: str = "this machine") -> str | None:
    """None when `other` may carry `here`'s name; else a refusal showing both descriptions."""
    if here.name != other.name:
        return None
    diff = differences(here, other)
    if not diff:
        return None
    return (f"card {other.name!r} is {whose}'s name, but this describes other hardware ({', '.join(diff)} "
            f"differ): this says {describe(other)}; {whose} is {describe(here)}. One name means one "
            "description: refused, nothing of it written (measured elsewhere, it needs that machine's own name)")
