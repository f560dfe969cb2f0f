"""What a tune or a hand-run benches: a model's kernels at a shape, and the variants of each.

`model_units` lowers a reference model (`emmy_core.graph`) at a (B, S) shape and returns
one `Unit` per kernel instance, in graph order (the harness dedupes identical kernels).
`tune_plan` gives every distinct kernel its candidates on the card (all, or a seeded
sample that always keeps the first option). `forced_knobs` reads hand-forced `NAME=VALUE`
pairs strictly against the schedule vocabulary, and `hand_variant` completes them with
the kernel's first option for the knobs not forced.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from emmy_core.bench.harness import BenchError, Unit, dedupe
from emmy_core.dtypes import MODEL_DTYPES, torch_dtype
from emmy_core.ir import Program
from emmy_core.knobs import FAMILY_KNOBS, candidates, sample_candidates, view
from emmy_core.knobs.route import is_library, library_knobs, with_library
from emmy_core.knobs.vocab import SCHEDULE_KNOBS
from emmy_core.targets import Card

_INT = re.compile(r"-?[0-9]+")


def model_units(model: str, shape: Mapping[str, int], dtype: str = "f16") -> list[Unit]:
    """One unit per kernel the model lowers to at `shape` in `dtype` (graph order; repeats kept for dedupe)."""
    from emmy_core.graph.pipeline import compile_model

    if dtype not in MODEL_DTYPES:
        raise ValueError(f"model dtype {dtype!r} is not one of {', '.join(MODEL_DTYPES)}")
    lowered = compile_model(model, dict(shape), torch_dtype(dtype))
    return [Unit(k.program, k.sizes(dict(shape)), label=f"{model}:{k.node}") for k in lowered.kernels]


def tune_plan(units: Sequence[Unit], card: Card, budget: int | None = None,
              seed: int = 0) -> list[tuple[Unit, list[dict[str, object]]]]:
    """Each distinct unit with its candidates on `card`: all of them, or a sample of `budget` (first kept); a
    matrix product's library route (torch's own kernel, `knobs.route`) is measured too, before them and outside
    the budget."""
    plan: list[tuple[Unit, list[dict[str, object]]]] = []
    for p in dedupe((u, ()) for u in units):
        pool = candidates(p.unit.program, card) if budget is None else \
            sample_candidates(p.unit.program, card, budget, seed)
        variants = with_library(p.unit.program, pool)
        plan.extend((p.unit, variants) for _ in range(p.count))  # every instance, so the bench counts them
    return plan


def parse_knob_value(name: str, text: str) -> object:
    """`text` as a value of knob `name` (int, power of two, enum, bool), checked against its range."""
    spec = SCHEDULE_KNOBS.get(name)
    if spec is None:
        raise ValueError(f"unknown knob {name!r}; known: {', '.join(SCHEDULE_KNOBS)}")
    value: object
    if spec.kind == "bool":
        if text.lower() not in ("true", "false", "1", "0"):
            raise ValueError(f"{name} takes true or false, not {text!r}")
        value = text.lower() in ("true", "1")
    elif spec.kind in ("enum", "version"):
        value = text
    else:  # ASCII digits only: int() also takes other scripts' digits (`２`), signs, spaces and `1_0`
        if _INT.fullmatch(text) is None:
            raise ValueError(f"{name} takes an integer, not {text[:40]!r}")
        value = int(text, 10) if len(text) <= 40 else (-1 if text[0] == "-" else 1) * 10**40  # out of range
    problem = spec.problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def forced_knobs(pairs: Sequence[str], target: str) -> dict[str, object]:
    """`NAME=VALUE` pairs as a knob dict of `target`'s vocabulary; ValueError naming the pair at fault."""
    out: dict[str, object] = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        name, text = name.strip(), text.strip()
        if not sep or not name or not text:
            raise ValueError(f"--knob {pair[:60]!r} is not NAME=VALUE")
        if name in out:
            raise ValueError(f"--knob {name} given twice")
        try:
            out[name] = parse_knob_value(name, text)
        except ValueError as exc:
            raise ValueError(f"--knob {pair[:60]!r}: {exc}") from None
        if SCHEDULE_KNOBS[name].target not in (target, "any"):
            raise ValueError(f"--knob {name} belongs to the {SCHEDULE_KNOBS[name].target} vocabulary; "
                             f"the card is {target}")
    return out


def accepts(program: Program, card: Card, forced: Mapping[str, object]) -> bool:
    """Whether the kernel's family on the card's target has every forced knob."""
    family = view(program).family
    return set(forced) <= set(FAMILY_KNOBS.get((card.target, family), ()))


def hand_variant(program: Program, card: Card, forced: Mapping[str, object]) -> dict[str, object]:
    """The forced knobs over the kernel's first option (the knobs not forced keep the safe default); `library=torch`
    is the library route, with this torch's release unless one is forced."""
    if is_library(forced):
        return {**library_knobs(), **forced}
    pool = candidates(program, card)
    if not pool:
        raise BenchError(f"kernel {program.name} has no candidates on {card.name}")
    return {**pool[0], **forced}
