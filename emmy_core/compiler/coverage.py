"""What the `emmy` backend ran where: one `GraphReport` per compiled graph (its ops, those on Emmy kernels, its
matrix-product FLOPs, the ops torch ran and why, the calls torch ran), and the report as text.

Apart from the backend itself so that readers of a report (`emmy compile`, `emmy explain`, `CompiledGraphs`)
need none of the backend's machinery.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FellBack:
    """An op torch ran instead of Emmy: its FX node, what it is, and why."""

    node: str
    op: str
    reason: str


@dataclass(frozen=True)
class GroupRace:
    """The race that decided how a group runs at the sizes it last ran (`compiler.race`): at `sizes`, the first of
    their size bucket, each contender's median (us: `emmy` the group as settled, `own` on Emmy's kernels only,
    `torch` the ops it replaces) and the winner."""

    group: str
    sizes: str
    medians_us: dict[str, float]
    winner: str

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group, "sizes": self.sizes, "medians_us": dict(self.medians_us), "winner": self.winner}

    def text(self) -> str:
        times = ", ".join(f"{k} {v:.0f} us" for k, v in self.medians_us.items())
        return f"{self.group} at {self.sizes or 'its static sizes'}: {times}: runs {self.winner}"


@dataclass(frozen=True)
class GraphReport:
    """The coverage of one compiled graph at the sizes it last ran."""

    name: str
    ops: int
    ops_on_emmy: int
    matmul_flops: int
    matmul_flops_on_emmy: int
    sizes: dict[str, int]  # Dynamo's symbols at the last run
    fell_back: tuple[FellBack, ...]
    notes: tuple[str, ...]
    groups: int  # groups compiled to Emmy graphs (live or handed back)
    built: bool = True  # False: resolved only (explain); the ops "on Emmy" are the ones planned for it
    calls: int = 0  # calls of the graph
    torch_calls: int = 0  # of those calls, the ones in which torch ran a live group (autograd on, a size of 0, ...)
    races: tuple[GroupRace, ...] = ()  # per raced group, the race behind its last size

    @property
    def flops_share(self) -> float | None:
        return self.matmul_flops_on_emmy / self.matmul_flops if self.matmul_flops else None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "ops": self.ops, "ops_on_emmy": self.ops_on_emmy,
                "matmul_flops": self.matmul_flops, "matmul_flops_on_emmy": self.matmul_flops_on_emmy,
                "sizes": dict(self.sizes), "groups": self.groups, "notes": list(self.notes), "built": self.built,
                "calls": self.calls, "torch_calls": self.torch_calls, "races": [r.to_json() for r in self.races],
                "fell_back": [{"node": f.node, "op": f.op, "reason": f.reason} for f in self.fell_back]}



def render_reports(reports: Sequence[GraphReport]) -> str:
    """The coverage as text: one line per graph, then each op that fell back with its reason."""
    lines = []
    for r in reports:
        share = f"{100 * r.flops_share:.1f}%" if r.flops_share is not None else "no matmul"
        sizes = ",".join(f"{k}={v}" for k, v in sorted(r.sizes.items())) or "static"
        planned = "" if r.built else " (planned: resolved, not built)"
        lines.append(f"{r.name} ({sizes}): {r.ops_on_emmy}/{r.ops} ops on Emmy kernels{planned}; "
                     f"matmul FLOPs on Emmy {r.matmul_flops_on_emmy}/{r.matmul_flops} ({share})")
        lines += [f"  torch {f.op} ({f.node}): {f.reason}" for f in r.fell_back]
        if r.torch_calls:
            lines.append(f"  torch ran Emmy's groups in {r.torch_calls} of {r.calls} call(s) of the graph: gradients "
                         "tracked (call under torch.no_grad()), a size of 0 or a changed attribute")
        lines += [f"  race: {race.text()}" for race in r.races]
        lines += [f"  note: {n}" for n in r.notes]
    total = sum(r.matmul_flops for r in reports)
    if len(reports) > 1 and total:
        on = sum(r.matmul_flops_on_emmy for r in reports)
        lines.append(f"all graphs: matmul FLOPs on Emmy {on}/{total} ({100 * on / total:.1f}%)")
    return "\n".join(lines)
