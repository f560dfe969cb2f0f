"""Cards: the card table (gpus.json, plus a user card file), the CPU probe, resolving a card by name, physical floors."""

from emmy_core.targets.card import CPU_FIELDS, GPU_FIELDS, NUMERIC_FIELDS, TARGETS, Card
from emmy_core.targets.cpu import ProbeError, probe_cpu
from emmy_core.targets.floors import min_time_us, peak_bandwidth_gbs, peak_tflops
from emmy_core.targets.resolve import (
    LOCAL,
    UnknownCard,
    card_from_properties,
    card_slug,
    known_cards,
    local_card,
    resolve_card,
)
from emmy_core.targets.table import CardTableError, load_table
from emmy_core.targets.user_cards import CARDS_ENV, cards_file_from_env, known_table

__all__ = [
    "CARDS_ENV", "CPU_FIELDS", "GPU_FIELDS", "LOCAL", "NUMERIC_FIELDS", "TARGETS", "Card", "CardTableError", "ProbeError",
    "UnknownCard", "card_from_properties", "card_slug", "cards_file_from_env", "known_cards", "known_table",
    "load_table", "local_card",
    "min_time_us", "peak_bandwidth_gbs", "peak_tflops", "probe_cpu", "resolve_card",
]
