# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Measurements and the prior
#
# What the measurements say, and where the prior is wrong. This notebook reads what the chain
# (`make run`, or the nightly job) leaves under `_data/`: the tuning database `_data/tune.db`,
# opened with DuckDB **read-only** (nothing here can change it), and the dataset export
# `_data/dataset/` that the fit and the evaluation read. It answers three questions:
#
# 1. the fastest configuration of every kernel, per card and setting;
# 2. what tuning buys over the rule's first option (the configuration a compile takes with no evidence);
# 3. where the prior is wrong: the pools where its pick is slowest against the fastest measured, by card.
#
# It is kept as a Jupytext pair: this `.py` file is the source; `jupytext --to ipynb` makes a notebook of it.

# %% tags=["parameters"]
DATA = "_data"  # the folder the chain wrote; a relative path is read from the repository root
PRIOR = ""  # a prior artifact to judge; empty: the installed prior
WORST = 10  # how many of the worst pools to list

# %%
from pathlib import Path

import duckdb
import matplotlib.pyplot as plt
import numpy as np
import polars as pl

pl.Config.set_fmt_str_lengths(64)  # CPU card names are long (model, family, ISA, cores): show them whole


def repository_root(start: Path) -> Path:
    """The repository this notebook belongs to: Jupyter starts kernels in `notebooks/`, not at the root."""
    for folder in (start, *start.parents):
        if (folder / "notebooks" / "measurements_and_the_prior.py").is_file():
            return folder
    return start


data = Path(DATA) if Path(DATA).is_absolute() else repository_root(Path.cwd().resolve()) / DATA
con = duckdb.connect(str(data / "tune.db"), read_only=True)
con.sql("SELECT card, setting, count(*) AS rows, count(*) FILTER (WHERE status = 'failed') AS failed, "
        "count(DISTINCT kernel_id) AS kernels FROM measurements GROUP BY ALL ORDER BY ALL").pl()

# %% [markdown]
# ## 1. The fastest configuration per kernel and card
#
# The store's `fastest` view: the fastest working row of each kernel at each size, per card and
# setting, with its knobs. `c_name` is the kernel's readable name.

# %%
fastest = con.sql(
    "SELECT k.c_name, f.sizes, f.card, f.setting, f.median_us, f.knobs "
    "FROM fastest f JOIN kernels k USING (kernel_id) ORDER BY f.card, f.setting, k.c_name, f.sizes").pl()
print(f"{fastest.height} pools have a fastest row")
fastest.head(20)

# %% [markdown]
# ## 2. What tuning buys over the first option
#
# For every pool where the rule's first option was measured, its time over the fastest measured
# time: 1.0 means the safe default was already the best; 3.0 means tuning made that kernel three
# times faster. The pools come from the export (`pools.parquet`, with each member's rank in the rule).

# %%
pools = con.sql(
    "SELECT p.kernel_id, k.c_name, p.sizes, p.card, p.setting, "
    "min(p.median_us) FILTER (WHERE p.status = 'ok') AS best_us, "
    "any_value(p.median_us) FILTER (WHERE p.candidate_rank = 0 AND p.status = 'ok') AS first_us, "
    "count(*) FILTER (WHERE p.measured) AS measured "
    "FROM read_parquet(?) p JOIN kernels k USING (kernel_id) GROUP BY ALL",
    params=[str(data / "dataset" / "pools.parquet")]).pl()
gain = (pools.filter(pl.col("first_us").is_not_null() & pl.col("best_us").is_not_null())
        .with_columns((pl.col("first_us") / pl.col("best_us")).alias("first_over_best")))
summary = (gain.group_by("card", "setting")
           .agg(pl.len().alias("pools"), pl.col("first_over_best").median().alias("median"),
                pl.col("first_over_best").max().alias("max"),
                (pl.col("first_over_best").log().mean().exp()).alias("geomean"))
           .sort("card", "setting"))
summary

# %%
fig, ax = plt.subplots(figsize=(7, 3.6))
for (card, setting), group in gain.group_by("card", "setting", maintain_order=True):
    ax.hist(np.log2(group["first_over_best"].to_numpy()), bins=20, alpha=0.6, label=f"{card} / {setting}")
ax.set_xlabel("log2(first option / fastest)  (0 = the safe default was best)")
ax.set_ylabel("pools")
ax.set_title("What tuning buys over the rule's first option")
ax.legend(fontsize=7)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 3. Where the prior is wrong
#
# The measured view of `emmy eval prior` (`emmy_core.eval.evaluate`): every fork of the dataset
# scored by the prior (the installed one, or `PRIOR`) over its measured members; the pick is the
# best-scored working member (a failed pick is replaced by the next, as a compile does). Its
# slowdown is the pick's time over the fastest: 1.00 = the prior chose the best. Cards are
# described from the export's own rows, never from this machine.

# %%
from emmy_core.eval import evaluate
from emmy_core.prior import installed_prior_path

report = evaluate(data / "dataset", PRIOR or installed_prior_path(), pools="measured")
rows = [{"kernel_id": r["kernel_id"], "sizes": r["sizes"], "card": r["card"], "setting": r["setting"],
         "members": r["measured_members"], "slowdown": r["top1"]} for r in report.pools if r["top1"] is not None]
wrong = pl.DataFrame(rows).join(con.sql("SELECT kernel_id, c_name FROM kernels").pl(), on="kernel_id")
(wrong.group_by("card", "setting")
 .agg(pl.len().alias("pools"), (pl.col("slowdown").log().mean().exp()).alias("geomean slowdown"),
      (pl.col("slowdown") <= 1.0).mean().alias("share picked best"), pl.col("slowdown").max().alias("worst"))
 .sort("card", "setting"))

# %%
worst = wrong.sort("slowdown", descending=True).group_by("card", maintain_order=True).head(WORST)
worst.select("card", "setting", "c_name", "sizes", "members", "slowdown")

# %%
fig, ax = plt.subplots(figsize=(11, 0.34 * max(4, worst.height) + 1.4))
cards = list(dict.fromkeys(worst["card"].to_list()))
colours = dict(zip(cards, plt.rcParams["axes.prop_cycle"].by_key()["color"], strict=False))
labels = [f"{r['c_name']} {r['sizes']} ({r['setting']})" for r in worst.iter_rows(named=True)]
ax.barh(range(worst.height), worst["slowdown"].to_numpy() - 1.0, left=1.0,
        color=[colours.get(c, "tab:gray") for c in worst["card"].to_list()])
ax.set_yticks(range(worst.height), labels, fontsize=7)
ax.invert_yaxis()
ax.set_xlim(left=1.0)
ax.set_xlabel("the prior's pick over the fastest measured (1.00 = best; the axis starts there)")
ax.set_title("Where the prior is wrong: the worst pools by card")
ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=colours[c]) for c in cards], labels=cards, fontsize=7,
          loc="lower right")
fig.tight_layout()
plt.show()

# %%
con.close()
