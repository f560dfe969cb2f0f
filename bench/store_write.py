"""Benchmark of the one writer: a million rows recorded in batches, then `emmy db check` over them.

Beside it, in the same run, a plain DuckDB bulk insert of the same rows (Arrow table ->
INSERT into a table with the same columns, no key, no rules, schedule ids computed
beforehand and not timed: the strongest baseline), and the ratio of the two. Rows are
built batch by batch outside the timed sections, as a tune produces them: every row has
its own knob dict. Peak memory is the process's maximum resident set (getrusage).

    .venv/bin/python bench/store_write.py [--rows 1000000] [--batch 100000] [--dir DIR]

Data: 200 kernels x 5 sizes x 500 schedules x 2 cards (an H100 and an H200), about 8 %
failures, every key distinct (a first tune); then 100,000 rows re-recorded over existing
keys (half better, half worse) to time the replace path.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from emmy_core.ir import kernel_id, parse
from emmy_core.store import CardRow, MeasurementRow, Schedule, open_store
from emmy_core.store.batch import MEASUREMENT_COLUMNS
from emmy_core.store.check import check_db

KERNEL = """kernel ew_{name} {{
  axis B = dyn(8)
  axis C = {cols}
  in a: f32[B, C]
  in b: f32[B, C]
  out y: f32[B, C]
  for i in B {{
    for j in C {{
      y[i, j] = {op}(a[i, j], b[i, j])
    }}
  }}
}}
"""
OPS = ("add", "mul", "sub", "max", "min")
CARDS = [CardRow("NVIDIA H100 80GB HBM3", "cuda", {"sm_count": 132, "bandwidth_gbs": 3350}),
         CardRow("NVIDIA H200", "cuda", {"sm_count": 132, "bandwidth_gbs": 4800})]
SIZES = ("B=1", "B=8", "B=64", "B=512", "B=4096")


def kernels(n: int) -> list:  # type: ignore[type-arg]
    return [parse(KERNEL.format(name=f"{OPS[i % 5]}_{i}", cols=64 * (1 + i // 5), op=OPS[i % 5])) for i in range(n)]


def schedules(n: int) -> list[dict[str, object]]:
    out = []
    for block in (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192):
        for warps in (1, 2, 4, 8, 16):
            for stages in range(1, 9):
                for group in (1, 4):
                    out.append({"block": block, "num_warps": warps, "num_stages": stages, "group_m": group})
    return out[:n]


def rows(total: int, batch: int, kids: list[str], knobs: list[dict[str, object]]) -> Iterator[list[MeasurementRow]]:
    """Batches of distinct keys: kernel x sizes x schedule x card, about 8 % failures."""
    per_kernel = len(SIZES) * len(knobs) * len(CARDS)
    out: list[MeasurementRow] = []
    for i in range(total):
        k, rest = divmod(i, per_kernel)
        s, rest = divmod(rest, len(knobs) * len(CARDS))
        j, c = divmod(rest, len(CARDS))
        args = (kids[k % len(kids)], SIZES[s], dict(knobs[j]), CARDS[c].name, "deploy")
        if i % 13 == 0:
            out.append(MeasurementRow.failed(*args, "timeout" if i % 2 else "build_error"))
        else:
            out.append(MeasurementRow.ok(*args, 1.0 + (i * 7919 % 10007) / 100, spread=0.02, samples=10))
        if len(out) == batch:
            yield out
            out = []
    if out:
        yield out


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def plain_insert(path: Path, batches: Iterator[list[MeasurementRow]]) -> tuple[float, int]:
    """The baseline: the same rows' values, Arrow -> INSERT, no rules (schedule ids computed untimed)."""
    import duckdb
    import pyarrow as pa

    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE measurements (kernel_id TEXT, sizes TEXT, schedule_id TEXT, card TEXT, setting TEXT, "
                "status TEXT, failure TEXT, median_us DOUBLE, spread DOUBLE, samples INTEGER, source TEXT, "
                "measured_at TIMESTAMP)")
    seconds, n = 0.0, 0
    memo: dict[tuple, str] = {}  # type: ignore[type-arg]
    for batch in batches:
        sids = []
        for r in batch:
            key = tuple(r.knobs.items())  # type: ignore[union-attr]
            if key not in memo:
                memo[key] = Schedule(r.knobs).schedule_id
            sids.append(memo[key])
        now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        started = time.perf_counter()
        cols = {c: [getattr(r, c) for r in batch] for c in MEASUREMENT_COLUMNS if c not in ("schedule_id",
                                                                                           "measured_at")}
        cols["schedule_id"] = sids
        cols["measured_at"] = [now] * len(batch)
        table = pa.table({c: cols[c] for c in MEASUREMENT_COLUMNS})
        con.register("staged", table)
        con.execute("INSERT INTO measurements SELECT * FROM staged")
        con.unregister("staged")
        seconds += time.perf_counter() - started
        n += len(batch)
    con.close()
    return seconds, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=100_000)
    ap.add_argument("--dir", type=Path, default=None, help="where to put the two database files (default: a temp dir)")
    args = ap.parse_args()
    work = args.dir or Path(tempfile.mkdtemp(prefix="emmy-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    for name in ("writer.db", "plain.db"):
        (work / name).unlink(missing_ok=True)
        (work / (name + ".wal")).unlink(missing_ok=True)

    progs = kernels(200)
    kids = [kernel_id(k) for k in progs]
    knobs = schedules(500)
    for k in knobs:
        assert Schedule(k)

    started = time.perf_counter()
    n_built = sum(len(b) for b in rows(args.rows, args.batch, kids, knobs))
    build_s = time.perf_counter() - started
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs (others' work slows every figure)")
    print(f"building {n_built:,} rows (untimed below): {build_s:.2f} s")

    plain_s, n_plain = plain_insert(work / "plain.db", rows(args.rows, args.batch, kids, knobs))
    peak_plain = peak_mb()
    print(f"plain DuckDB bulk insert: {n_plain:,} rows in {plain_s:.2f} s = {n_plain / plain_s:,.0f} rows/s "
          f"(peak RSS so far {peak_plain:.0f} MB)")

    writer_s, writer_cpu, n_writer = 0.0, 0.0, 0
    with open_store(work / "writer.db", "w") as store:
        store.record(kernels=progs, cards=CARDS)
        for batch in rows(args.rows, args.batch, kids, knobs):
            t0, c0 = time.perf_counter(), time.process_time()
            summary = store.record(batch, origin="bench")
            writer_s += time.perf_counter() - t0
            writer_cpu += time.process_time() - c0
            n_writer += summary.inserted
        # the replace path: the first 100,000 keys again, half better and half worse
        again = next(rows(min(args.batch, args.rows), args.batch, kids, knobs))
        again = [MeasurementRow.ok(r.kernel_id, r.sizes, r.knobs, r.card, r.setting,
                                   (r.median_us if r.status == "ok" else 50.0) * (0.5 if i % 2 else 2.0), samples=10)
                 for i, r in enumerate(again)]
        t0 = time.perf_counter()
        summary = store.record(again, origin="bench again")
        again_s = time.perf_counter() - t0
        counts = store.counts()
    peak_writer = peak_mb()
    assert n_writer == args.rows == counts["measurements"], (n_writer, counts)
    print(f"writer: {n_writer:,} rows in {writer_s:.2f} s = {n_writer / writer_s:,.0f} rows/s "
          f"({args.batch:,} per batch; peak RSS {peak_writer:.0f} MB); CPU time of this process "
          f"{writer_cpu:.2f} s (all threads) = {n_writer / writer_cpu:,.0f} rows per CPU-second")
    print(f"writer, replace path: {len(again):,} rows over stored keys in {again_s:.2f} s "
          f"({summary.replaced:,} replaced, {summary.ignored:,} kept as they were)")
    ratio = writer_s / plain_s
    print(f"ratio writer / plain insert: {ratio:.2f}x")

    t0 = time.perf_counter()
    report = check_db(work / "writer.db")
    check_s = time.perf_counter() - t0
    print(f"emmy db check over {counts['measurements']:,} rows: {check_s:.2f} s, "
          f"{'clean' if report.ok else report.counts}")
    peak = peak_mb()
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print(f"peak memory (max RSS of this process): {peak:.0f} MB")
    print(json.dumps({"rows": n_writer, "batch": args.batch, "writer_rows_per_s": round(n_writer / writer_s),
                      "writer_rows_per_cpu_s": round(n_writer / writer_cpu),
                      "plain_rows_per_s": round(n_plain / plain_s), "ratio": round(ratio, 2),
                      "replace_rows_per_s": round(len(again) / again_s), "check_s": round(check_s, 2),
                      "check_clean": report.ok, "peak_rss_mb": round(peak)}))


if __name__ == "__main__":
    main()
