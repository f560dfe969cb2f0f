"""Growth, simulated: a fleet of N cards' tune files folded nightly and imported, at 10, 100 and 1,000 cards.

Each card delivers one synthetic tune file of 66 pools (6 rmsnorm kernels x 11 sizes) of 32 candidates
(2,112 rows, 1 in 20 failed). Per fleet size, each step runs in its own process, which reports its wall
time and peak resident memory:

- `fold`: the inbox of N tune files folded into an empty freeze folder (`fold_tune_files`: checks, copies,
  refresh into N freeze files);
- `import`: the N freeze files imported into a fresh DuckDB store (`import_db --fresh`).

The cost must grow linearly: from 100 to 1,000 cards each step's time may grow at most 1.3 x 10 (printed
as the growth over linear, the baseline being the 100-card run of the same step in the same run). The
step's CPU time (user + system, all its threads) is judged the same way: on a shared machine it moves
less with the load than the wall time does.
Run: .venv/bin/python bench/scale.py [--cards 10,100,1000]
"""

from __future__ import annotations

import argparse
import itertools
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

KERNELS, SIZES, CANDIDATES = 6, 11, 32
LIMIT = 1.3


def card_name(i: int) -> str:
    return f"Synthetic GPU {i:04d}"


def generate(inbox: Path, cards: int) -> int:
    """One tune file per card in `inbox`; returns the rows written."""
    from emmy_core.fileio.filekind import TUNE_FORMAT
    from emmy_core.formats.cardfile import KernelEntry, RowWriter, render_document
    from emmy_core.formats.tunefile import tune_file_name
    from emmy_core.ir import render
    from emmy_core.ir.builders import rmsnorm
    from emmy_core.knobs.vocab import canonical_knobs
    from emmy_core.store import CardRow

    schedules = [canonical_knobs({"block": b, "num_stages": s, "num_warps": w})
                 for b in (64, 128, 256, 512) for w in (1, 2, 4, 8) for s in (1, 2)]
    assert len(schedules) == CANDIDATES
    texts = [render(rmsnorm(64 + 16 * k)) for k in range(KERNELS)]
    sizes = [f"B={b}" for b in range(1, SIZES + 1)]
    inbox.mkdir(parents=True, exist_ok=True)
    rows = 0
    for c in range(cards):
        w = RowWriter()
        entries = []
        for k, text in enumerate(texts):
            e = KernelEntry(text, f"rmsnorm_{k}")
            for si, s in enumerate(sizes):
                for ki, knobs in enumerate(schedules):
                    failed = (c + k + si + ki) % 20 == 0
                    median = 1e9 if failed else 1.0 + ((c * 7919 + k * 613 + si * 104729 + ki * 31) % 100000) / 997.0
                    e.rows.append(((s, "deploy", knobs), w.line(s, "deploy", knobs, "failed" if failed else "ok",
                                                                "build_error" if failed else None, median,
                                                                None if failed else 0.0125, 0 if failed else 10,
                                                                "tune", False)))
                    rows += 1
            entries.append(e)
        card = CardRow(card_name(c), "cuda", {"sm_count": 100 + c % 40, "bandwidth_gbs": 1000.0 + c})
        name = tune_file_name(card.name, "20261201T000000Z-1")
        (inbox / name).write_text(render_document(TUNE_FORMAT, card, entries, []), encoding="ascii")
    return rows


def step(name: str, work: Path, cards: int) -> None:
    t0 = time.perf_counter()
    if name == "generate":
        detail = f"{generate(work / 'inbox', cards)} rows in {cards} tune files"
    elif name == "fold":
        from emmy_core.freezefolder.fold import fold_tune_files

        (work / "freezes").mkdir()
        report = fold_tune_files(work / "freezes", work / "inbox")
        detail = f"{len(report.moved)} tune files -> {len(list((work / 'freezes').glob('*.json')))} freeze files"
    elif name == "import":
        from emmy_core.exchange.importer import import_db

        files = sorted((work / "freezes").glob("*.json"))
        out = import_db(work / "fleet.db", files, fresh=True)
        assert all(o.ok for o in out), [o.message for o in out if not o.ok][:3]
        detail = f"{len(files)} freeze files, {sum(o.summary.offered for o in out if o.summary)} rows"
    else:
        raise ValueError(name)
    seconds = time.perf_counter() - t0
    use = resource.getrusage(resource.RUSAGE_SELF)
    cpu = use.ru_utime + use.ru_stime
    print(json.dumps({"step": name, "cards": cards, "seconds": seconds, "cpu_s": cpu, "peak_mb": own_peak_mb(),
                      "detail": detail}))


def run(name: str, work: Path, cards: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--step", name, "--work", str(work), "--cards", str(cards)],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"step {name} at {cards} cards failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cards", default="10,100,1000", help="comma-separated fleet sizes")
    ap.add_argument("--step")
    ap.add_argument("--work")
    args = ap.parse_args()
    if args.step:
        step(args.step, Path(args.work), int(args.cards))
        return
    sizes = [int(x) for x in args.cards.split(",")]
    results: dict[tuple[str, int], dict] = {}
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="emmy-bench-scale-") as tmp:
            for name in ("generate", "fold", "import"):
                r = results[name, n] = run(name, Path(tmp), n)
                print(f"{n:>5} cards  {name:<8} {r['seconds']:8.2f} s  cpu {r['cpu_s']:8.2f} s  peak {r['peak_mb']:7.0f} MB   {r['detail']}",
                      flush=True)
    for name in ("fold", "import"):
        for a, b in itertools.pairwise(sizes):
            growth = (results[name, b]["seconds"] / results[name, a]["seconds"]) / (b / a)
            work = (results[name, b]["cpu_s"] / results[name, a]["cpu_s"]) / (b / a)
            verdict = "linear" if max(growth, work) <= LIMIT else f"SUPERLINEAR (limit {LIMIT}x)"
            print(f"{name:<8} {a} -> {b} cards: time x{results[name, b]['seconds'] / results[name, a]['seconds']:.1f}"
                  f" for x{b / a:g} cards = {growth:.2f} of linear, cpu time {work:.2f} of linear ({verdict}); peak memory "
                  f"x{results[name, b]['peak_mb'] / results[name, a]['peak_mb']:.1f}")


if __name__ == "__main__":
    main()
