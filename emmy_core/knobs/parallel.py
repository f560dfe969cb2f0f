"""How well a CPU matrix product's schedule suits the sizes it runs at: the threads it keeps busy, the rows it wastes.

A CPU matmul shares its work among `threads` as blocks: every batch index times the blocks along `par_axis`
(rows of `tile_m` for `m`, columns of `tile_n` for `n`; `codegen.c_matmul`). Where a size offers fewer blocks
than threads, the extra threads wait: the schedule runs as the same one with fewer threads would, so another
option of the pool that splits the work finer is at least as fast. On a card no measurement covers, the prior
chose one such schedule at 128 rows (row blocks of 128, two threads: one idle; 11.3 ms a product where the
rule's first option took 5.8, on a 2-core AMD EPYC). A dynamic axis makes this a question of the size being
settled, not of the pool, which is a function of the kernel and the card alone (`knobs.view`).

Its micro-kernel computes `unroll` rows at a time (16 per AMX tile), so at fewer rows than that it computes
rows that do not exist: a dynamic-row bf16 product at one row ran in 640-930 us with 14- or 16-row
micro-kernels, 230-260 us with 6-row ones, 80-112 us with one-row ones (torch 240-360) on a Zen 4 EPYC.
`fit_rows` keeps the options whose micro-kernel is no taller than the rows at hand, else the shortest offered
(a dynamic-row pool's computing options have 6 rows at least, `knobs.cpu_matmul.CPU_MIN_CHAINS`; its streaming
ones go down to one).

A product of few rows streams its weights from memory, and the options that stream B (`prefetch_l2`, the deepest
pass, one row block: `knobs.cpu_matmul._stream_options`) ran 7-43% faster there; at more rows they only add
instructions. `stream_rows` keeps, at sizes of at most `CPU_STREAM_ROWS` rows, the streaming options of the tallest
micro-kernel that fits (one pass over B where the pool has one) where a pool offers them (a dynamic M: the rule
streams a static one of that many rows), and elsewhere the rest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from math import prod

from emmy_core.ir.family import MatmulShape, classify
from emmy_core.ir.nodes import Program
from emmy_core.ir.sizes import extents
from emmy_core.knobs.cpu_matmul import CPU_STREAM_ROWS

Knobs = Mapping[str, object]


def _ceil(a: int, b: int) -> int:
    return -(-a // max(1, b))


def _extents(kernel: Program, sizes: Mapping[str, int]) -> tuple[int, int, int] | None:
    """(batch, M, N) of a matmul at `sizes` (None: not a matmul): read once for a whole pool."""
    shape = classify(kernel)
    if not isinstance(shape, MatmulShape):
        return None
    ext = extents(kernel, dict(sizes))
    return prod(ext[a] for a in shape.batch), ext[shape.m], ext[shape.n]


def _blocks(work: tuple[int, int, int], knobs: Knobs) -> int | None:
    if not all(k in knobs for k in ("threads", "par_axis", "tile_m", "tile_n")):
        return None
    batch, m, n = work
    if knobs["par_axis"] == "m":
        return batch * _ceil(m, int(knobs["tile_m"]))  # type: ignore[call-overload]
    return batch * _ceil(n, int(knobs["tile_n"]))  # type: ignore[call-overload]


def _idle(work: tuple[int, int, int], knobs: Knobs) -> int:
    blocks = _blocks(work, knobs)
    return 0 if blocks is None else max(0, int(knobs["threads"]) - blocks)  # type: ignore[call-overload]


def parallel_blocks(kernel: Program, sizes: Mapping[str, int], knobs: Knobs) -> int | None:
    """The blocks a CPU matmul schedule shares among its threads at `sizes` (None: not a CPU matmul schedule)."""
    work = _extents(kernel, sizes)
    return None if work is None else _blocks(work, knobs)


def idle_threads(kernel: Program, sizes: Mapping[str, int], knobs: Knobs) -> int:
    """How many of the schedule's threads find no block at `sizes` (0 for any other kind of schedule)."""
    work = _extents(kernel, sizes)
    return 0 if work is None else _idle(work, knobs)


def keep_busy(kernel: Program, sizes: Mapping[str, int], knobs: Sequence[Knobs]) -> list[int]:
    """The indices of `knobs` that leave no thread idle at `sizes`; all of them where every one does (a product
    of one row on a card of many cores: nothing finer is offered, and the ranking decides among them)."""
    work = _extents(kernel, sizes)
    if work is None:
        return list(range(len(knobs)))
    idle: dict[tuple[object, ...], int] = {}  # a pool of 1500 options holds a few dozen ways to share the work
    busy = []
    for i, k in enumerate(knobs):
        way = (k.get("threads"), k.get("par_axis"), k.get("tile_m"), k.get("tile_n"))
        if way not in idle:
            idle[way] = _idle(work, k)
        if idle[way] == 0:
            busy.append(i)
    return busy or list(range(len(knobs)))


def micro_rows(knobs: Knobs) -> int | None:
    """The rows a CPU matmul micro-kernel computes at a time (None: not a CPU matmul schedule)."""
    unroll = knobs.get("unroll")
    if not isinstance(unroll, int) or "par_axis" not in knobs:
        return None
    return 16 * unroll if knobs.get("dot") == "amx" else unroll


def fit_rows(kernel: Program, sizes: Mapping[str, int], knobs: Sequence[Knobs]) -> list[int]:
    """The indices of `knobs` whose micro-kernel is no taller than the product's rows at `sizes`; else those of
    the shortest micro-kernel offered (at one row on AMX, a 16-row tile is the least there is)."""
    work = _extents(kernel, sizes)
    rows = [micro_rows(k) for k in knobs]
    if work is None or any(r is None for r in rows):
        return list(range(len(knobs)))
    m = work[1]
    fit = [i for i, r in enumerate(rows) if r is not None and r <= m]
    if fit:
        return fit
    least = min(r for r in rows if r is not None)
    return [i for i, r in enumerate(rows) if r == least]

SIZE_DECIDED_KNOBS = frozenset({"prefetch_l2"})  # what `stream_rows` decides from the sizes (no prior sees it)


def stream_rows(kernel: Program, sizes: Mapping[str, int], knobs: Sequence[Knobs]) -> list[int]:
    """The indices of `knobs` that stream B (`prefetch_l2`) where the product has at most `CPU_STREAM_ROWS` rows
    (and no batch) at `sizes`, those of the tallest micro-kernel among them (the fewest passes over B: the rule's
    regime, which the prior never saw measured), and those that do not stream elsewhere: within each `dot`
    family, so a family that offers only one kind (AMX tiles stream nothing) keeps all of its options; at a few
    rows, where a dot-product family streams, none of the fma family's (a bf16 product widened to f32 FMAs
    beside `vdpbf16ps`: the prior, which sees no `dot`, ranked them alike)."""
    work = _extents(kernel, sizes)
    if work is None:
        return list(range(len(knobs)))
    few = work[0] == 1 and work[1] <= CPU_STREAM_ROWS
    families: dict[object, list[int]] = {}
    for i, k in enumerate(knobs):
        families.setdefault(k.get("dot", "fma"), []).append(i)
    if few and "fma" in families and any(knobs[i].get("prefetch_l2") for d, members in families.items()
                                         if d != "fma" for i in members):
        del families["fma"]  # the card's own dot instruction streams: never widening to f32 FMAs beside it
    kept: list[int] = []
    for members in families.values():
        chosen = [i for i in members if bool(knobs[i].get("prefetch_l2")) == few]
        if few and chosen:
            tallest = max(micro_rows(knobs[i]) or 0 for i in chosen)
            chosen = [i for i in chosen if (micro_rows(knobs[i]) or 0) == tallest]
        kept += chosen or members
    return sorted(kept)


def suited(kernel: Program, sizes: Mapping[str, int], knobs: Sequence[Knobs]) -> list[int]:
    """The indices of `knobs` that suit `sizes`: `keep_busy`, then `fit_rows`, then `stream_rows`, each over what
    the one before kept (what the prior tier ranks, and what a tune measures first)."""
    kept = list(range(len(knobs)))
    for rule in (keep_busy, fit_rows, stream_rows):
        kept = [kept[i] for i in rule(kernel, sizes, [knobs[j] for j in kept])]
    return kept
