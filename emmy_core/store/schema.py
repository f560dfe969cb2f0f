"""The tables and views of every store instance, with the documentation the data dictionary is made from.

Table and column names are fixed (analysts and other tools query them); raising
`SCHEMA_VERSION` is required for any change here, and a file of another version is
moved aside by a writer (which starts an empty one) and refused by a reader (nothing migrates). The DDL is
generated from constant specs below, never from values.

`measurements` has no PRIMARY KEY index on purpose: the key (kernel_id, sizes,
schedule_id, card, setting) is enforced by the one writer, which merges each batch on it,
and `emmy db check` counts duplicate keys. An ART index over the five text columns made
bulk writes about four times slower when measured on the 2-core development machine
(a million rows in batches of 100,000: about 10 s upserting through the index, 2.5 s merging).
"""

from __future__ import annotations

from dataclasses import dataclass

from emmy_core.store.rows import CARD_NUMBERS, FAILURE_KINDS
from emmy_core.targets.card import TARGETS

SCHEMA_VERSION = 3
WRITER_VERSION = "emmy-store/1"


@dataclass(frozen=True)
class Column:
    name: str
    sql_type: str
    doc: str


@dataclass(frozen=True)
class Table:
    name: str
    one_row_per: str
    columns: tuple[Column, ...]
    constraints: tuple[str, ...] = ()


@dataclass(frozen=True)
class View:
    name: str
    doc: str
    columns: tuple[Column, ...]
    sql: str


_CARD_NUMBER_DOCS = {
    "sm_count": "streaming multiprocessors (NVIDIA) or compute units (AMD)",
    "cores": "logical CPUs the card name counts (CPU)",
    "memory_gb": "device memory, GB as the vendor states it",
    "bandwidth_gbs": "peak memory bandwidth, GB/s",
    "smem_per_sm_kb": "shared memory per SM, KiB",
    "smem_per_block_kb": "largest shared memory one block may use, KiB",
    "registers_per_sm": "32-bit registers per SM",
    "registers_per_thread": "most 32-bit registers one thread may use",
    "max_threads_per_block": "most threads in one block",
    "max_threads_per_sm": "most resident threads per SM",
    "warp_size": "threads per warp / wavefront",
    "l2_mb": "L2 cache, MiB (GPU)",
    "cc_major": "compute capability, major (NVIDIA)",
    "cc_minor": "compute capability, minor (NVIDIA)",
    "clock_mhz": "nominal or maximum clock, MHz",
    "peak_tflops_f16": "peak dense f16 TFLOP/s with f32 accumulation",
    "peak_tflops_f16_acc16": "peak dense f16 TFLOP/s with f16 accumulation",
    "peak_tflops_f32": "peak f32 (non-tensor) TFLOP/s",
    "l1d_kb": "L1 data cache per core, KiB (CPU)",
    "l2_kb": "L2 cache per instance, KiB (CPU)",
    "l3_kb": "L3 cache per instance, KiB (CPU)",
    "simd_bits": "widest SIMD register the compiler may use, bits (CPU)",
}

KEY = "(kernel_id, sizes, schedule_id, card, setting)"

TABLES: tuple[Table, ...] = (
    Table("meta", "version stamp (key/value)", (
        Column("key", "TEXT PRIMARY KEY", "`schema_version`, `identity_version`, `writer_version` or `created_at`"),
        Column("value", "TEXT NOT NULL", "the value, as text"),
    )),
    Table("cards", "card", (
        Column("name", "TEXT PRIMARY KEY", "full card name, e.g. `NVIDIA H200`; part of every measurement key"),
        Column("target", f"TEXT NOT NULL CHECK (target IN ({', '.join(repr(t) for t in TARGETS)}))", "`cuda` or `cpu`"),
        Column("arch", "TEXT", "architecture tag, e.g. `hopper`, `cdna2`, `x86_64` (NULL: unknown)"),
        Column("tensor_cores", "TEXT", "tensor-core instructions offered, comma-separated (NULL: none known)"),
        *(Column(k, "BIGINT" if t is int else "DOUBLE", _CARD_NUMBER_DOCS[k] + " (NULL: unknown)")
          for k, t in CARD_NUMBERS.items()),
    )),
    Table("kernels", "kernel", (
        Column("kernel_id", "TEXT PRIMARY KEY", "exact identity: sha256 of the canonical text with dynamic "
               "axes by name (the one computed value stored: a cache key)"),
        Column("loop_program", "TEXT NOT NULL", "canonical loop-program text (`emmy_core.ir.render`)"),
        Column("c_name", "TEXT NOT NULL", "the kernel's name in generated source"),
    )),
    Table("routing", "kernel a structural decision minted", (
        Column("parent_id", "TEXT NOT NULL", "the kernel the decision applies to (`kernels.kernel_id`)"),
        Column("decision", "TEXT NOT NULL", "`cut:<seam>` or `split:<axis>=<parts>`"),
        Column("piece_index", "INTEGER NOT NULL", "position of the piece, from 0"),
        Column("piece_id", "TEXT NOT NULL", "the minted kernel (`kernels.kernel_id`)"),
    ), ("PRIMARY KEY (parent_id, decision, piece_index)",)),
    Table("schedules", "distinct knob assignment", (
        Column("schedule_id", "TEXT PRIMARY KEY", "sha256 of `knobs` (canonical JSON)"),
        Column("knobs", "TEXT NOT NULL", "canonical JSON of the schedule knobs: sorted keys, no spaces"),
    )),
    Table("measurements", f"measured variant per card and setting; key {KEY}", (
        Column("kernel_id", "TEXT NOT NULL", "`kernels.kernel_id`"),
        Column("sizes", "TEXT NOT NULL", "dynamic axis sizes benched at, canonical (`B=8,S=512`; empty: static)"),
        Column("schedule_id", "TEXT NOT NULL", "`schedules.schedule_id`"),
        Column("card", "TEXT NOT NULL", "`cards.name`"),
        Column("setting", "TEXT NOT NULL", "compile setting, e.g. `deploy` or `rank`"),
        Column("status", "TEXT NOT NULL CHECK (status IN ('ok', 'failed'))", "`ok` or `failed`"),
        Column("failure", f"TEXT CHECK (failure IN ({', '.join(repr(k) for k in FAILURE_KINDS)}))",
               "failure kind of a failed row (NULL when ok)"),
        Column("median_us", "DOUBLE NOT NULL", "median time, microseconds; failed rows hold the watchdog "
               "placeholder 1e9"),
        Column("spread", "DOUBLE", "relative spread of the repeats (NULL: not recorded)"),
        Column("samples", "INTEGER NOT NULL", "timed repeats behind the median (0 for a failure)"),
        Column("source", "TEXT NOT NULL CHECK (source IN ('tune', 'hand', 'import'))", "`tune`, `hand` or `import`"),
        Column("measured_at", "TIMESTAMP", "when it was measured, UTC (NULL: imported from a source that keeps "
               "no time, such as a freeze or tune file; an import never stamps its own time)"),
    )),
    Table("goldens", "reviewed choice for (kernel_id, sizes, card, setting)", (
        Column("kernel_id", "TEXT NOT NULL", "`kernels.kernel_id`"),
        Column("sizes", "TEXT NOT NULL", "canonical sizes"),
        Column("card", "TEXT NOT NULL", "`cards.name`"),
        Column("setting", "TEXT NOT NULL", "compile setting"),
        Column("schedule_id", "TEXT", "the chosen schedule (`schedules.schedule_id`), or NULL"),
        Column("decision", "TEXT", "the chosen structural decision, or NULL (exactly one of the two is set)"),
    ), ("PRIMARY KEY (kernel_id, sizes, card, setting)",
        "CHECK ((schedule_id IS NULL) <> (decision IS NULL))")),
)

_FASTEST_COLS = (
    Column("kernel_id", "TEXT", "kernel"), Column("sizes", "TEXT", "sizes"), Column("card", "TEXT", "card"),
    Column("setting", "TEXT", "setting"), Column("schedule_id", "TEXT", "the fastest working schedule"),
    Column("knobs", "TEXT", "its knobs (canonical JSON; NULL if the schedule row is missing)"),
    Column("median_us", "DOUBLE", "its median"), Column("spread", "DOUBLE", "its spread"),
    Column("samples", "INTEGER", "its samples"), Column("source", "TEXT", "its source"),
    Column("measured_at", "TIMESTAMP", "when"),
)

VIEWS: tuple[View, ...] = (
    View("fastest", "the fastest working (`ok`) row per kernel, sizes, card and setting (ties: lowest schedule_id)",
         _FASTEST_COLS,
         "SELECT m.kernel_id, m.sizes, m.card, m.setting, m.schedule_id, s.knobs, m.median_us, m.spread, "
         "m.samples, m.source, m.measured_at "
         "FROM measurements m LEFT JOIN schedules s ON s.schedule_id = m.schedule_id WHERE m.status = 'ok' "
         "QUALIFY row_number() OVER (PARTITION BY m.kernel_id, m.sizes, m.card, m.setting "
         "ORDER BY m.median_us, m.schedule_id) = 1"),
    View("failure_rates", "measured variants and failures per card and setting, with a count per failure kind", (
        Column("card", "TEXT", "card"), Column("setting", "TEXT", "setting"),
        Column("variants", "BIGINT", "measurement rows"), Column("failed", "BIGINT", "failed rows"),
        Column("failure_rate", "DOUBLE", "failed / variants"),
        *(Column(k, "BIGINT", f"failed rows of kind `{k}`")
          for k in FAILURE_KINDS),
    ),
         "SELECT card, setting, count(*) AS variants, count(*) FILTER (WHERE status = 'failed') AS failed, "
         "count(*) FILTER (WHERE status = 'failed') / count(*) AS failure_rate, "
         + ", ".join(f"count(*) FILTER (WHERE failure = '{k}') AS {k}" for k in FAILURE_KINDS) + " "
         "FROM measurements GROUP BY card, setting"),
    View("variants", "every measurement with its knobs and its kernel's name (a join analysts would otherwise "
         "write each time)", (
        Column("c_name", "TEXT", "kernel name"), *(Column(c.name, c.sql_type.split()[0], "as in `measurements`")
                                                   for c in TABLES[5].columns),
        Column("knobs", "TEXT", "canonical knob JSON"),
    ),
         "SELECT k.c_name, m.*, s.knobs FROM measurements m LEFT JOIN kernels k ON k.kernel_id = m.kernel_id "
         "LEFT JOIN schedules s ON s.schedule_id = m.schedule_id"),
    View("decision_prices", "price of a structural decision per sizes, card and setting: the sum of its pieces' "
         "fastest rows, listed only when every piece has one (pieces are looked up at the parent's sizes)", (
        Column("parent_id", "TEXT", "kernel"), Column("decision", "TEXT", "decision"),
        Column("sizes", "TEXT", "sizes"), Column("card", "TEXT", "card"), Column("setting", "TEXT", "setting"),
        Column("price_us", "DOUBLE", "sum of the pieces' fastest medians"),
        Column("pieces", "BIGINT", "pieces priced (all of them)"),
    ),
         "SELECT r.parent_id, r.decision, f.sizes, f.card, f.setting, sum(f.median_us) AS price_us, "
         "count(*) AS pieces FROM routing r JOIN fastest f ON f.kernel_id = r.piece_id "
         "JOIN (SELECT parent_id, decision, count(*) AS n FROM routing GROUP BY parent_id, decision) p "
         "ON p.parent_id = r.parent_id AND p.decision = r.decision "
         "GROUP BY r.parent_id, r.decision, f.sizes, f.card, f.setting, p.n HAVING count(*) = p.n"),
)

TABLE_NAMES = tuple(t.name for t in TABLES)
VIEW_NAMES = tuple(v.name for v in VIEWS)


def ddl() -> list[str]:
    """CREATE statements for every table, then every view (identifiers are the constants above)."""
    out = []
    for t in TABLES:
        parts = [f"{c.name} {c.sql_type}" for c in t.columns] + list(t.constraints)
        out.append(f"CREATE TABLE {t.name} ({', '.join(parts)})")
    out += [f"CREATE VIEW {v.name} AS {v.sql}" for v in VIEWS]
    return out


FILLED = {
    "meta": "written when a file is created (`open_store(..., \"w\")`); never empty in a store that opened",
    "cards": "every import and every tune (the card a row was measured on, from the freeze's or tune file's own "
             "description); empty only in a store nothing was imported into",
    "kernels": "every import and every tune: the loop programs measured or referenced by a golden",
    "routing": "a tune or hand run that measures a structural decision (`split:`, `cut:`) records its pieces here; "
               "empty when nothing measured one, as on the chain's `_data/tune.db` today (the repository freeze "
               "holds no structural decisions: each card file's `decisions` list is empty)",
    "schedules": "every measured knob assignment, deduplicated by `schedule_id`",
    "measurements": "`emmy tune`, `emmy run --bench` (source `hand`) and every import of a freeze, tune file, golden "
                    "record or Kernel Tuner cache",
    "goldens": "a freeze's reviewed choices on import, `emmy db promote`, golden records; empty in a tuning "
               "database that only `emmy tune` wrote",
    "fastest": "computed from `measurements`: empty when no row is `ok`",
    "failure_rates": "computed from `measurements`: one row per card and setting measured",
    "variants": "computed from `measurements`, `schedules` and `kernels`: as many rows as `measurements`",
    "decision_prices": "computed from `routing` and `fastest`: empty whenever `routing` is, so 0 rows on the chain's "
                       "database (no structural decision was measured into the freeze); a price appears once a tune "
                       "measured every piece of a decision at the parent's sizes",
}
"""What fills each table and view, and when it is empty (the data dictionary's 'Filled by' line)."""

OPENING = [
    "## Opening the stores",
    "",
    "Open a DuckDB file read-only, so that a writer (the chain, `emmy tune`) is not blocked and nothing you run",
    "changes it; a file a writer holds refuses even a reader (`Could not set lock on file`): query the Parquet",
    "export then, which no one locks. From the repository root after `make run`:",
    "",
    "| store | what it is | open it with |",
    "|---|---|---|",
    "| `_data/tune.db` | the chain's tuning database (the freeze imported) | "
    "`duckdb.connect(\"_data/tune.db\", read_only=True)` or `duckdb -readonly _data/tune.db` |",
    "| `_data/dataset/*.parquet` | the export the fit and the evaluation read: one file per table, "
    "`pools.parquet` (every candidate of every measured fork, measured or not), `manifest.json` (row counts, "
    "digests) | `duckdb.sql(\"SELECT * FROM '_data/dataset/measurements.parquet'\")`, or Polars "
    "`pl.read_parquet` |",
    "| `~/.cache/emmy/autotune.db` | this machine's local tuning database (`EMMY_TUNING_DB`) that `emmy tune` "
    "writes and compiles read | as `tune.db`, read-only |",
    "",
    "Three queries to paste (`.venv/bin/python`, then `import duckdb`):",
    "",
    "```python",
    "con = duckdb.connect(\"_data/tune.db\", read_only=True)",
    "# 1. rows per card and setting, and how many of them failed",
    "con.sql(\"SELECT card, setting, count(*) AS rows, count(*) FILTER (WHERE status <> 'ok') AS failed \"",
    "        \"FROM measurements GROUP BY ALL ORDER BY ALL\").show()",
    "# 2. what tuning buys: each fork's fastest row against its rule's first option (candidate_rank 0)",
    "duckdb.sql(\"SELECT card, round(median(first.median_us / best.median_us), 3) AS first_over_best, count(*) AS forks \"",
    "           \"FROM (SELECT kernel_id, sizes, card, setting, min(median_us) AS median_us \"",
    "           \"      FROM '_data/dataset/pools.parquet' WHERE status = 'ok' GROUP BY ALL) best \"",
    "           \"JOIN '_data/dataset/pools.parquet' first USING (kernel_id, sizes, card, setting) \"",
    "           \"WHERE first.candidate_rank = 0 AND first.status = 'ok' GROUP BY ALL ORDER BY ALL\").show()",
    "# 3. the golden of each fork with its knobs, from the views",
    "con.sql(\"SELECT g.card, k.c_name AS kernel, g.sizes, v.knobs, v.median_us FROM goldens g JOIN kernels k USING (kernel_id) \"",
    "        \"JOIN variants v USING (kernel_id, sizes, card, setting, schedule_id) ORDER BY ALL LIMIT 10\").show()",
    "```",
    "",
]
"""How to open each store, and three queries to paste (the second on the Parquet export's `pools.parquet`)."""


def data_dictionary() -> str:
    """The data dictionary (docs/data-dictionary.md) as Markdown, generated from the specs above."""
    lines = [
        "# Data dictionary of the Emmy store",
        "",
        "Every store instance (the tuning database `~/.cache/emmy/autotune.db`, the dataset databases under",
        "`_data/`) is one DuckDB file with these tables and views. Generated from `emmy_core/store/schema.py`",
        f"(schema version {SCHEMA_VERSION}); `tests/store/test_schema.py` fails when the two disagree.",
        "",
        "Versions live in `meta` as key/value rows: `schema_version` (this schema), `identity_version`",
        "(`emmy_core.ir.identity.IDENTITY_VERSION`, how `kernel_id` is computed), `writer_version` and",
        "`created_at`. Nothing migrates: a file of another schema or identity version is refused by a reader;",
        "the next writer moves it aside to a name that says its versions (`autotune.schema1-identity1.db`),",
        "says where, and starts an empty file. `emmy db check` verifies the tables agree with themselves.",
        "",
        f"The measurement key is {KEY}; it is kept unique by the one writer (a better `ok` row replaces a",
        "worse one, a failure never replaces an `ok` row) rather than by an index, and `emmy db check`",
        "counts duplicates.",
        "",
        *OPENING,
        "## Tables",
    ]
    for t in TABLES:
        lines += ["", f"### `{t.name}`", "", f"One row per {t.one_row_per}. Filled by: {FILLED[t.name]}.", "",
                  "| column | type | meaning |", "|---|---|---|"]
        lines += [f"| `{c.name}` | {c.sql_type.split()[0]} | {c.doc} |" for c in t.columns]
        if t.constraints:
            lines += ["", "Constraints: " + "; ".join(f"`{c}`" for c in t.constraints) + "."]
    lines += ["", "## Views"]
    for v in VIEWS:
        lines += ["", f"### `{v.name}`", "", v.doc[0].upper() + v.doc[1:] + f". Filled by: {FILLED[v.name]}.", "",
                  "| column | type | meaning |", "|---|---|---|"]
        lines += [f"| `{c.name}` | {c.sql_type} | {c.doc} |" for c in v.columns]
    return "\n".join(lines) + "\n"
