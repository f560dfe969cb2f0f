"""Draws the chain's asset graph (`docs/asset-graph.png`) from the Dagster definitions themselves.

The README shows the graph; a screenshot of the UI went stale when an asset changed. This figure is
drawn from `pipelines.definitions.defs`: every asset in its group's column band, placed by its depth
(the longest path from an asset with no parent), an arrow per dependency, observed source assets
dashed. Rerun it after changing the chain: `.venv/bin/python docs/asset_graph.py`.
"""

from __future__ import annotations

import io
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from emmy_core.fileio.safefile import atomic_write_text

OUT = Path(__file__).resolve().parent / "asset-graph.png"


@dataclass(frozen=True)
class Placed:
    """One asset as drawn: its name, group, whether it is observed (not materialized), parents and position."""

    name: str
    group: str
    observed: bool
    parents: tuple[str, ...]
    column: int
    row: int


def layout() -> list[Placed]:
    """Every asset of the chain's definitions, placed: column = depth, row = order within the column."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pipelines.definitions import defs

        graph = defs.resolve_asset_graph()
    nodes = {k.to_user_string(): graph.get(k) for k in graph.get_all_asset_keys()}
    parents = {name: tuple(sorted(p.to_user_string() for p in n.parent_keys)) for name, n in nodes.items()}
    depth: dict[str, int] = {}

    def depth_of(name: str) -> int:
        if name not in depth:
            depth[name] = 1 + max((depth_of(p) for p in parents[name]), default=-1)
        return depth[name]

    rows: dict[int, int] = {}
    out = []
    for name in sorted(nodes, key=lambda n: (depth_of(n), nodes[n].group_name or "", n)):
        col = depth_of(name)
        out.append(Placed(name, nodes[name].group_name or "default", not nodes[name].is_materializable,
                          parents[name], col, rows.get(col, 0)))
        rows[col] = rows.get(col, 0) + 1
    return out


def describe(placed: list[Placed]) -> str:
    """The graph as text, one asset a line (`name [group] <- parents`): kept in the PNG, so a test can tell a
    figure drawn from other definitions."""
    return "\n".join(f"{p.name} [{p.group}{', observed' if p.observed else ''}] <- {', '.join(p.parents)}"
                     for p in sorted(placed, key=lambda p: p.name))


def drawn(path: Path) -> str | None:
    """The graph text a figure written by `draw` carries (None: none)."""
    from PIL import Image

    with Image.open(path) as image:
        return image.info.get("Description")


def draw(placed: list[Placed], path: Path) -> None:
    """The figure of `placed` written to `path` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    groups = sorted({p.group for p in placed}, key=lambda g: min(p.column for p in placed if p.group == g))
    colours = dict(zip(groups, ("#dbeafe", "#dcfce7", "#fef3c7", "#fce7f3", "#ede9fe"), strict=False))
    width, height, gap_x, gap_y = 2.7, 0.7, 0.8, 0.5
    at = {p.name: (p.column * (width + gap_x), -p.row * (height + gap_y)) for p in placed}
    fig, ax = plt.subplots(figsize=(2.2 + 2.1 * (1 + max(p.column for p in placed)), 3.2))
    for p in placed:
        x, y = at[p.name]
        ax.add_patch(FancyBboxPatch((x, y), width, height, boxstyle="round,pad=0.05", linewidth=1.2,
                                    facecolor=colours.get(p.group, "#f3f4f6"), edgecolor="#374151",
                                    linestyle="--" if p.observed else "-"))
        ax.text(x + width / 2, y + height * 0.6, p.name, ha="center", va="center", fontsize=10, family="monospace")
        ax.text(x + width / 2, y + height * 0.22, p.group + (" (observed)" if p.observed else ""), ha="center",
                va="center", fontsize=7, color="#4b5563")
        for parent in p.parents:
            px, py = at[parent]
            skips = p.column - next(q.column for q in placed if q.name == parent) > 1  # around the boxes between
            ax.add_patch(FancyArrowPatch((px + width + 0.05, py + height / 2), (x - 0.05, y + height / 2),
                                         arrowstyle="-|>", mutation_scale=12, color="#6b7280",
                                         connectionstyle=f"arc3,rad={-0.25 if skips else 0.0}"))
    xs = [v[0] for v in at.values()]
    ys = [v[1] for v in at.values()]
    ax.set_xlim(min(xs) - 0.3, max(xs) + width + 0.3)
    ax.set_ylim(min(ys) - 0.3, max(ys) + height + 1.2)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title("The chain's assets (pipelines/definitions.py): each arrow is a dependency", fontsize=10)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=130, bbox_inches="tight", metadata={"Description": describe(placed)})
    plt.close(fig)
    atomic_write_text(path, buffer.getvalue())  # the old figure stays until the new one is whole


def main() -> int:
    placed = layout()
    draw(placed, OUT)
    print(f"wrote {OUT.name}: {len(placed)} assets in {1 + max(p.column for p in placed)} columns")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
