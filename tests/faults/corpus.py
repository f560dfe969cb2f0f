"""Valid sources of every kind `emmy db import` reads, and hostile mutations of them.

Shared by the standing fault suite (tests/faults, a bounded number of examples) and its longer
runner (bench/faults.py). A mutation is a pure function of the source and a seeded random
generator, so any failure is replayed from its seed. The checks say what every import of a
hostile source must do: go in whole, or be refused with the project's own error (naming the
file, in a bounded message) with nothing written.
"""

from __future__ import annotations

import copy
import hashlib
import json
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emmy_core.exchange.export import MANIFEST, content_digest, export_db
from emmy_core.exchange.importer import SourceOutcome, import_into
from emmy_core.formats.freeze import freeze_db
from emmy_core.formats.golden import GoldenRecord, Trace, write_golden_file
from emmy_core.formats.tunefile import write_tune_file
from emmy_core.ir import kernel_id
from emmy_core.store import MeasurementRow, MeasurementStore, MemoryStore, open_store
from tests.store.test_files_freeze import H200, MM, NORM, PIECE_A, PIECE_B, populate

JSON_KINDS = ("freeze", "tune", "golden", "kerneltuner")
KINDS = (*JSON_KINDS, "database", "export")
MAX_MESSAGE = 3000

LONG = "q" * 100_000
HOSTILE_TEXT = ["", " ", LONG, "x" * 129, "B=08", "B=0", "B=8,B=8", "b=8", "split:K=2", "cut:epilogue", "NaN",
                "Infinity", "turbo", "deploy", "rank", "ok", "failed", "\u0000", "é", "\ud7ff", "../../x", "1e999",
                "kernel k {\n}", "tune", "import", "emmy-freeze", "emmy-tune", "emmy-golden", "{}", "[]",
                "NVIDIA H200", "CompilationFailedConfig", "2023-01-24 01:03:17+00:00", "block", "extern.x"]
HOSTILE_NUMBERS = [0, -1, 1, 2, 3, 48, 2**31, 2**63, 10**30, -10**30, 1e308, -1e308, 5e-324, -0.0, 0.5, 1e9,
                   999999999.9, 1000000000.0, 4096, 1.5]
HOSTILE_OTHER: list[Any] = [None, True, False, [], {}, [None], [[[]]], {"block": 64}, {"a": {"b": {"c": []}}},
                            ["x"] * 50, list(range(100))]


def hostile_value(rng: random.Random) -> Any:
    pick = rng.random()
    if pick < 0.4:
        return rng.choice(HOSTILE_TEXT)
    if pick < 0.75:
        return rng.choice(HOSTILE_NUMBERS)
    return copy.deepcopy(rng.choice(HOSTILE_OTHER))


# ---- the valid corpus ------------------------------------------------------------------------------

def kt_cache() -> dict[str, Any]:
    return {"device_name": "NVIDIA GeForce RTX 3090", "kernel_name": "vector_add", "problem_size": [1024],
            "tune_params_keys": ["block_size_x"], "tune_params": {"block_size_x": [32, 64, 128]},
            "objective": "time",
            "cache": {"32": {"block_size_x": 32, "time": 1.5, "times": [1.0, 2.0, 1.5],
                             "timestamp": "2023-01-24 01:03:17.677311+00:00"},
                      "64": {"block_size_x": 64, "time": "CompilationFailedConfig"},
                      "128": {"block_size_x": 128, "time": 0.5, "times": [0.5, 0.5, 0.75, 0.25]}}}


def build_corpus(folder: Path) -> dict[str, Path]:
    """One valid source of each kind in `folder` (each imports cleanly into an empty store)."""
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / "source.db"
    with open_store(db, "w") as s:
        populate(s)
    (freeze,) = freeze_db(db, folder / "freeze", H200.name)
    tune = write_tune_file(folder / "nvidia-h200.tune-20261130T010000Z.json", card=H200, kernels=[NORM, MM],
                           measurements=[MeasurementRow.ok(kernel_id(NORM), "B=8", {"block": 64}, H200.name,
                                                           "deploy", 3.0, spread=0.1, samples=5),
                                         MeasurementRow.failed(kernel_id(MM), "", {"block": 32}, H200.name,
                                                               "rank", "timeout")])
    trace = Trace("tiny-llama", {"input_ids": (8, 512)})
    golden = write_golden_file(folder / "goldens.json", H200, [
        GoldenRecord(trace, NORM, "B=8", "deploy", knobs={"block": 64, "num_warps": 4}),
        GoldenRecord(trace, MM, "", "deploy", decision="split:K=2", pieces=(PIECE_A, PIECE_B))])
    cache = folder / "cache.json"
    cache.write_text(json.dumps(kt_cache()))
    export_db(db, folder / "export")
    return {"freeze": freeze, "tune": tune, "golden": golden, "kerneltuner": cache, "database": db,
            "export": folder / "export"}


# ---- mutations -------------------------------------------------------------------------------------

def _nodes(doc: Any, path: tuple = ()) -> list[tuple[tuple, Any]]:
    out = [(path, doc)]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _nodes(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _nodes(v, (*path, i))
    return out


def _parent(doc: Any, path: tuple) -> Any:
    for p in path[:-1]:
        doc = doc[p]
    return doc


def mutate_json(doc: Any, rng: random.Random, edits: int) -> Any:
    """`doc` with `edits` hostile edits: a value replaced, a key dropped or added, an element repeated,
    removed or swapped, a string cut or grown."""
    doc = copy.deepcopy(doc)
    for _ in range(edits):
        nodes = [n for n in _nodes(doc) if n[0]]
        if not nodes:
            return hostile_value(rng)
        path, node = rng.choice(nodes)
        parent, key = _parent(doc, path), path[-1]
        op = rng.randrange(7)
        if op == 0 or op == 1:
            parent[key] = hostile_value(rng)
        elif op == 2:
            del parent[key]
        elif op == 3 and isinstance(parent, dict):
            parent[rng.choice(["comment", "golden", "failure", "spread", "x" * 70, "rows", "pieces"])] = \
                hostile_value(rng)
        elif op == 4 and isinstance(parent, list):
            parent.insert(rng.randrange(len(parent) + 1), copy.deepcopy(node))
        elif op == 5 and isinstance(node, str):
            parent[key] = node[: rng.randrange(len(node) + 1)] if rng.random() < 0.5 else node * rng.randrange(2, 50)
        elif op == 6 and isinstance(node, int | float) and not isinstance(node, bool):
            parent[key] = rng.choice([node * 10**rng.randrange(1, 40), -node, node + 1, node / 3, float(node)])
        else:
            parent[key] = hostile_value(rng)
    return doc


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    """`data` cut, with bytes flipped, inserted or repeated."""
    op = rng.randrange(4)
    if op == 0 or not data:
        return data[: rng.randrange(len(data) + 1)]
    i = rng.randrange(len(data))
    if op == 1:
        return data[:i] + bytes([data[i] ^ (1 << rng.randrange(8))]) + data[i + 1:]
    if op == 2:
        return data[:i] + rng.choice([b"\x00", b"\xff", b'"', b"{", b"]", b",", b"\\u0000", b"-1e999"]) + data[i:]
    j = min(len(data), i + rng.randrange(1, 64))
    return data[:j] + data[i:j] * rng.randrange(2, 20) + data[j:]


def hostile_json_source(kind: str, corpus: dict[str, Path], out: Path, seed: int, edits: int,
                        raw: bool = False) -> Path:
    """A hostile copy of the corpus source of a JSON `kind` (edited as JSON, or as bytes when `raw`)."""
    rng = random.Random(seed)
    data = corpus[kind].read_bytes()
    if raw:
        out.write_bytes(mutate_bytes(data, rng))
    else:
        doc = mutate_json(json.loads(data), rng, edits)
        out.write_text(json.dumps(doc), encoding="utf-8", errors="surrogatepass")
    return out


# Columns of each table a hostile value may be written into, by SQL type family.
_DB_COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "kernels": (("kernel_id", "text"), ("loop_program", "text"), ("c_name", "text")),
    "schedules": (("schedule_id", "text"), ("knobs", "text")),
    "cards": (("name", "text"), ("target", "text"), ("arch", "text"), ("tensor_cores", "text"),
              ("sm_count", "int"), ("bandwidth_gbs", "float")),
    "measurements": (("kernel_id", "text"), ("sizes", "text"), ("schedule_id", "text"), ("card", "text"),
                     ("setting", "text"), ("status", "text"), ("failure", "text"), ("median_us", "float"),
                     ("spread", "float"), ("samples", "int"), ("source", "text")),
    "routing": (("parent_id", "text"), ("decision", "text"), ("piece_index", "int"), ("piece_id", "text")),
    "goldens": (("kernel_id", "text"), ("sizes", "text"), ("card", "text"), ("setting", "text"),
                ("schedule_id", "text"), ("decision", "text")),
}


def _typed_hostile(kind: str, rng: random.Random) -> Any:
    if kind == "text":
        return rng.choice([*HOSTILE_TEXT, '{"block": 48}', '{"split": "split:K=2"}', '{"block": 64, "block": 64}',
                           "f" * 64, json.dumps({"x" * 70: 1}), None])
    if kind == "int":
        return rng.choice([0, -1, 2**31 - 1, 4096, None])
    return rng.choice([0.0, -1.0, float("nan"), float("inf"), 1e9, 5e-324, None])


def hostile_database(corpus: dict[str, Path], out: Path, seed: int, edits: int) -> Path:
    """A copy of the corpus database with hostile values written into its tables (SQL, typed)."""
    import duckdb

    rng = random.Random(seed)
    shutil.copyfile(corpus["database"], out)
    con = duckdb.connect(str(out))
    try:
        for _ in range(edits):
            table = rng.choice(sorted(_DB_COLUMNS))
            column, kind = rng.choice(_DB_COLUMNS[table])
            value = _typed_hostile(kind, rng)
            try:  # names come from the constant table above, values are bound
                con.execute(f"UPDATE {table} SET {column} = ? WHERE rowid = (SELECT min(rowid) FROM {table})",
                            [value])
            except duckdb.Error:
                continue  # a constraint of the schema refused it: that row stays as it was
    finally:
        con.close()
    return out


def hostile_export(corpus: dict[str, Path], out: Path, seed: int, edits: int) -> Path:
    """A copy of the corpus export with hostile values in its Parquet files and a manifest whose digests
    match them (what a careful attacker, or a buggy exporter, hands over)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(seed)
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(corpus["export"], out)
    manifest = json.loads((out / MANIFEST).read_text())
    for _ in range(edits):
        table = rng.choice(sorted(_DB_COLUMNS))
        column, kind = rng.choice(_DB_COLUMNS[table])
        path = out / f"{table}.parquet"
        t = pq.read_table(path)
        if t.num_rows == 0:
            continue
        cols = t.to_pydict()
        cols[column][rng.randrange(t.num_rows)] = _typed_hostile(kind, rng)
        tmp = path.with_suffix(".tmp")
        try:
            pq.write_table(pa.table(cols, schema=t.schema), tmp)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError):
            tmp.unlink(missing_ok=True)
            continue  # the column's type refused the value: the table stays as it was
        tmp.replace(path)
        entry = manifest["tables"][table]
        entry["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
        entry["rows"] = t.num_rows
    manifest["digest"] = content_digest(manifest["tables"])
    (out / MANIFEST).write_text(json.dumps(manifest))
    return out


def hostile_source(kind: str, corpus: dict[str, Path], folder: Path, seed: int, edits: int = 1,
                   raw: bool = False) -> Path:
    """A hostile source of `kind`, written under `folder`."""
    if kind == "database":
        return hostile_database(corpus, folder / f"hostile-{seed}.db", seed, edits)
    if kind == "export":
        return hostile_export(corpus, folder / f"hostile-{seed}", seed, edits)
    return hostile_json_source(kind, corpus, folder / f"hostile-{seed}.json", seed, edits, raw)


# ---- what every import of a hostile source must do -----------------------------------------------

def state(store: MeasurementStore) -> tuple:
    """Everything a store holds, as comparable values."""
    return (store.counts(), store.kernels(), store.measurements(), store.routing(), store.goldens(), store.cards())


@dataclass
class Verdict:
    ok: bool
    message: str


def import_checked(store: MeasurementStore, source: Path) -> Verdict:
    """Imports `source` into `store` and checks the rules: no exception but the project's own (the importer
    turns those into a refusal), a refusal names the file in a bounded message and writes nothing."""
    before = state(store)
    (outcome,) = import_into(store, [source])
    check_outcome(outcome, source, before, state(store))
    return Verdict(outcome.ok, outcome.message)


def check_outcome(outcome: SourceOutcome, source: Path, before: tuple, after: tuple) -> None:
    if outcome.ok:
        return
    assert str(source) in outcome.message, f"a refusal must name the file: {outcome.message[:300]}"
    assert len(outcome.message) <= MAX_MESSAGE, f"a refusal of {len(outcome.message)} characters"
    assert "Traceback" not in outcome.message
    assert after == before, "a refused source wrote something"


def primed_store() -> MemoryStore:
    """A store already holding rows (so that 'nothing written' is a real check), in memory."""
    store = MemoryStore()
    populate(store)
    return store
