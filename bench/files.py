"""Files that travel, at scale: import, export and freeze times and peak memory.

Two workloads, each beside DuckDB handling the same data as plain JSON / Parquet in the same run:

1. every Kernel Tuner cache in ../shared/peer (skipped when the folder is absent): imported
   into a fresh store, then exported; baseline: DuckDB reading the same caches with read_json.
2. a synthetic freeze of N rows (default one million) generated here: imported into a fresh
   store, frozen again (checked byte-identical to the input), exported. Baselines: DuckDB
   reading the same rows as newline-delimited JSON and writing them as JSON and Parquet.

Each step runs in its own process, which reports its wall time and peak resident memory.
Targets for one million rows: import < 20 s, export < 5 s, freeze < 20 s, peak < 3 GB.
Run: .venv/bin/python bench/files.py [--rows N]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.own_peak import own_peak_mb  # noqa: E402

PEER = ROOT.parent / "shared" / "peer"
CARD = "NVIDIA H200"
SECONDS_PER_MILLION_ROWS = {"import": 20.0, "export": 5.0, "freeze": 20.0}  # the targets each step must meet


def generate(path: Path, rows: int) -> int:
    """A canonical freeze of `rows` rows: rmsnorm kernels x sizes x schedules, 1 in 20 failed."""
    from emmy_core.fileio.filekind import FREEZE_FORMAT
    from emmy_core.formats.cardfile import KernelEntry, RowWriter, render_document
    from emmy_core.formats.freeze import rehinted
    from emmy_core.ir import render
    from emmy_core.ir.builders import rmsnorm
    from emmy_core.knobs.vocab import canonical_knobs
    from emmy_core.store import CardRow

    schedules = [canonical_knobs({"block": b, "num_stages": s, "num_warps": w})
                 for b in (64, 128, 256, 512, 1024) for w in (1, 2, 4, 8, 16) for s in (1, 2, 3, 4)]  # 100
    sizes = [f"B={b}" for b in range(1, 51)]
    per_kernel = len(schedules) * len(sizes)
    n_kernels = max(1, -(-rows // per_kernel))
    w = RowWriter()
    entries = []
    made = 0
    for i in range(n_kernels):
        # B's expected size as a freeze writes it: the size measured most often, ties to the smaller (B=1)
        e = KernelEntry(rehinted(render(rmsnorm(64 + 16 * i)), {"B": 1}, {}), f"rmsnorm_{i}")
        for si, s in enumerate(sizes):
            for ki, k in enumerate(schedules):
                if made == rows:
                    break
                failed = (i + si + ki) % 20 == 0
                median = 1e9 if failed else 1.0 + ((i * 7919 + si * 104729 + ki * 31) % 100000) / 997.0
                e.rows.append(((s, "deploy", k), w.line(s, "deploy", k, "failed" if failed else "ok",
                                                        "build_error" if failed else None, median,
                                                        None if failed else 0.0125, 0 if failed else 10, "tune",
                                                        False)))
                made += 1
        entries.append(e)
    card = CardRow(CARD, "cuda", {"sm_count": 132, "bandwidth_gbs": 4800.0})
    path.write_text(render_document(FREEZE_FORMAT, card, entries, []), encoding="ascii")
    return made


def flat_rows(freeze: Path, out: Path) -> None:
    """The same rows as newline-delimited JSON (one object per row, kernel by name): the plain baseline input."""
    doc = json.loads(freeze.read_text())
    with out.open("w") as fh:
        for k in doc["kernels"]:
            for r in k["rows"]:
                fh.write(json.dumps({"kernel": k["c_name"], **r, "knobs": json.dumps(r["knobs"])}) + "\n")


# ---- steps, each in its own process -------------------------------------------------------------

def step(name: str, work: Path, rows: int) -> None:
    t0 = time.perf_counter()
    detail = ""
    extra: dict[str, bool] = {}
    if name == "generate":
        detail = f"{generate(work / 'synthetic.json', rows)} rows, " \
                 f"{(work / 'synthetic.json').stat().st_size / 1e6:.0f} MB"
        flat_rows(work / "synthetic.json", work / "synthetic.ndjson")
        t0 = time.perf_counter()
    elif name == "import":
        from emmy_core.exchange.importer import import_db

        (o,) = import_db(work / "synthetic.db", [work / "synthetic.json"], fresh=True)
        assert o.ok, o.message
        detail = o.message
    elif name == "freeze":
        from emmy_core.formats.freeze import freeze_db

        (p,) = freeze_db(work / "synthetic.db", work / "refrozen")
        same = p.read_bytes() == (work / "synthetic.json").read_bytes()
        detail = f"byte-identical to the imported freeze: {same}"
        extra["byte_identical"] = same
    elif name == "export":
        from emmy_core.exchange.export import export_db

        m = export_db(work / "synthetic.db", work / "export")
        detail = f"measurements {m['tables']['measurements']['rows']}, pools {m['tables']['pools']['rows']}"
    elif name.startswith("duckdb"):
        detail, inner = duckdb_step(name, work)
        t0 = time.perf_counter() - inner if inner is not None else t0
    elif name == "peer-import":
        from emmy_core.exchange.importer import import_db

        files = sorted(p for p in PEER.iterdir() if p.name.endswith((".json", ".json.gz")))
        out = import_db(work / "peer.db", files, fresh=True)
        assert all(o.ok for o in out), [o.message for o in out if not o.ok]
        detail = f"{len(files)} files, {sum(o.summary.offered for o in out if o.summary)} rows"
    elif name == "peer-export":
        from emmy_core.exchange.export import export_db

        m = export_db(work / "peer.db", work / "peer-export")
        detail = f"measurements {m['tables']['measurements']['rows']}"
    seconds = time.perf_counter() - t0
    use = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"step": name, "seconds": seconds, "cpu": use.ru_utime + use.ru_stime,
                      "peak_mb": own_peak_mb(), "detail": detail, **extra}))


def duckdb_step(name: str, work: Path) -> tuple[str, float | None]:
    """A baseline: what DuckDB alone takes for the same data (seconds of the timed part, when not all)."""
    import duckdb

    con = duckdb.connect()
    t0 = time.perf_counter()
    if name == "duckdb-read-json":
        con.execute("CREATE TABLE t AS SELECT * FROM read_json(?, format = 'newline_delimited')",
                    [str(work / "synthetic.ndjson")])
        took = time.perf_counter() - t0
        con.sql("SELECT * FROM t").to_parquet(str(work / "plain.parquet"))  # input of the next two (untimed)
        return f"{con.sql('SELECT count(*) FROM t').fetchall()[0][0]} rows into a table", took
    if name == "duckdb-write-parquet":
        con.execute("CREATE TABLE t AS SELECT * FROM read_parquet(?)", [str(work / "plain.parquet")])
        t0 = time.perf_counter()
        con.sql("SELECT * FROM t ORDER BY kernel, sizes, setting, knobs").to_parquet(str(work / "plain2.parquet"))
        return "table -> sorted Parquet", time.perf_counter() - t0
    if name == "duckdb-write-text":
        con.execute("CREATE TABLE t AS SELECT * FROM read_parquet(?)", [str(work / "plain.parquet")])
        t0 = time.perf_counter()
        con.sql("SELECT * FROM t ORDER BY kernel, sizes, setting, knobs").write_csv(str(work / "plain.csv"))
        return "table -> sorted CSV text", time.perf_counter() - t0
    if name == "duckdb-read-peer":
        files = sorted(str(p) for p in PEER.iterdir() if p.name.endswith((".json", ".json.gz")))
        n = 0
        for f in files:
            n += con.sql("SELECT len(json_keys(json, '$.cache')) FROM read_json_objects(?, "
                         "maximum_object_size = 67108864)", params=[f]).fetchall()[0][0]
        return f"{len(files)} files parsed, {n} cache entries counted", None
    raise ValueError(name)


def run(name: str, work: Path, rows: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--step", name, "--work", str(work), "--rows", str(rows)],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"step {name} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--step")
    ap.add_argument("--work")
    args = ap.parse_args()
    if args.step:
        step(args.step, Path(args.work), args.rows)
        return
    with tempfile.TemporaryDirectory(prefix="emmy-bench-files-") as tmp:
        work = Path(tmp)
        results = {}
        if PEER.is_dir():
            for name in ("peer-import", "peer-export", "duckdb-read-peer"):
                results[name] = run(name, work, args.rows)
        else:
            print("peer data not found beside the project (../shared/peer): skipping the peer workload")
        for name in ("generate", "import", "freeze", "export", "duckdb-read-json", "duckdb-write-parquet",
                     "duckdb-write-text"):
            results[name] = run(name, work, args.rows)
    report(results, args.rows)


def report(r: dict, rows: int) -> None:
    def line(name: str, base: str | None = None) -> None:
        x = r[name]
        ratio = f"  {x['seconds'] / r[base]['seconds']:6.1f}x {base}" if base else ""
        print(f"{name:<22} {x['seconds']:8.2f} s (process cpu {x['cpu']:6.2f} s)  peak {x['peak_mb']:7.0f} MB"
              f"{ratio}   {x['detail']}")

    if "peer-import" in r:
        print("peer caches (Kernel Tuner):")
        line("peer-import", "duckdb-read-peer")
        line("peer-export")
        line("duckdb-read-peer")
    print(f"synthetic freeze ({r['generate']['detail']}):")
    line("import", "duckdb-read-json")
    line("freeze", "duckdb-write-text")
    line("export", "duckdb-write-parquet")
    for name in ("duckdb-read-json", "duckdb-write-text", "duckdb-write-parquet"):
        line(name)
    scale = rows / 1_000_000
    peak = max(r[n]["peak_mb"] for n in ("import", "freeze", "export"))
    for name, target in SECONDS_PER_MILLION_ROWS.items():
        verdict = "ok" if r[name]["seconds"] <= target * scale else "MISSED"
        print(f"target {name} < {target * scale:.1f} s: {verdict}")
    print(f"target peak memory < 3 GB: {'ok' if peak < 3072 else 'MISSED'} ({peak:.0f} MB)")
    print(f"target refrozen byte-identical to the imported freeze: {'ok' if r['freeze']['byte_identical'] else 'MISSED'}")


if __name__ == "__main__":
    main()
