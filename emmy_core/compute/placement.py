"""Naming where work must run: the Dask worker resource of a card, so a card's bench lands on its machine."""

from __future__ import annotations


def card_resource(card: str) -> str:
    """`card-<slug>`: the resource a Dask worker of `card` offers (`--resources "card-<slug>=1"`)."""
    from emmy_core.formats.freeze import card_file_slug

    return f"card-{card_file_slug(card)}"
