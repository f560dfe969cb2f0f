"""How much hostile input, how many kills and full disks does the store survive, and how many rows are lost?

The longer runner of the standing fault suite (tests/faults runs the same properties with a bounded
number of examples). It prints, per section, the inputs tried, the faults injected and the rows lost
(the goal is zero), beside the load average:

1. hostile input: seeded mutations of one valid source of every kind the importer reads (JSON edits,
   byte edits, typed values written into a DuckDB file, re-digested Parquet cells of an export), each
   imported into a store already holding rows: it must go in whole or be refused naming the file in a
   bounded message with nothing written; and mutated loop programs, which may raise only IRError;
2. kill -9: every command that writes (import, fresh import, freeze, refresh-freeze, promote, tune into a
   database and into a tune file), killed at random moments over its run (tests/faults/kill.py);
3. disk full: freeze, export, refresh-freeze and import under a file-size limit (`ulimit -f`);
4. with --atheris RUNS (when atheris is installed): coverage-guided fuzzing of the importers, started
   from the same valid sources, RUNS inputs per kind;
5. the export race: readers open snapshots of a folder that `emmy db export` keeps swapping between two
   stores' exports; a snapshot whose manifest and tables come from different exports, or a read that
   fails, is a violation (a reader by paths, the old way, is run beside it for comparison);
6. concurrent chains: processes taking the workspace's chain lock at once (holding intervals must not
   overlap; one that may not wait must refuse naming the holder), and a holder killed -9 whose stale
   lock must be taken over with a note;
7. special input files (tests/faults/special_inputs.py, in a process of its own): a FIFO, /dev/zero and a
   folder given to every reader of an input path (prior, card file, extern order, report, import source,
   loop program) and to a store opened for reading and for writing (writes refuse what reads refuse); a
   hang, an acceptance or a raw exception is a violation;
8. the prior bomb: a 4 MB artifact of a depth-16 tree and 99,999 constant trees, loaded and scored
   under a 4 GiB address-space limit; anything but a clean refusal or a bounded load is a violation;
9. network peers: a loopback listener that never speaks, an HTTP server and a refused port, given as a
   `--scheduler tcp://` and as an http:// folder; a wait past 30 s, an acceptance or a raw exception is a
   violation.

Run: .venv/bin/python bench/faults.py [--seeds 500] [--kills 10] [--rows 8000] [--no-tune] [--atheris 20000]
     [--race-reads 300] [--chains 6]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import re
import resource
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from emmy_core.ir import IRError, parse, render  # noqa: E402
from emmy_core.ir.builders import day_one_kernels  # noqa: E402
from tests.faults.corpus import (  # noqa: E402
    JSON_KINDS,
    KINDS,
    build_corpus,
    hostile_source,
    import_checked,
    mutate_bytes,
    primed_store,
)
from tests.faults.kill import SCENARIOS, timed_run, trial  # noqa: E402


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (5 min {five:.2f}) on {os.cpu_count()} CPUs"


def hostile_inputs(corpus: dict[str, Path], work: Path, seeds: int) -> int:
    """Section 1; returns the violations found."""
    print(f"\n== 1. hostile input ({load()})")
    print(f"{'source':<12} {'tried':>7} {'accepted':>9} {'refused':>8} {'violations':>11} {'seconds':>8}")
    violations = 0
    for kind in KINDS:
        n = seeds if kind in JSON_KINDS else max(1, seeds // 10)
        tried = accepted = bad = 0
        t0 = time.monotonic()
        for seed in range(n):
            for raw in ((False, True) if kind in JSON_KINDS else (False,)):
                tried += 1
                source = hostile_source(kind, corpus, work, seed, 1 + seed % 4, raw)
                try:
                    accepted += import_checked(primed_store(), source).ok
                except BaseException as exc:  # a violation of the rules: reported, then the run goes on
                    bad += 1
                    if bad <= 3:
                        where = traceback.extract_tb(exc.__traceback__)[-1]
                        print(f"   VIOLATION {kind} seed {seed}{' bytes' if raw else ''}: {type(exc).__name__}: "
                              f"{str(exc)[:200]} (at {Path(where.filename).name}:{where.lineno})")
        violations += bad
        print(f"{kind:<12} {tried:>7} {accepted:>9} {tried - accepted - bad:>8} {bad:>11} "
              f"{time.monotonic() - t0:>8.1f}")
    texts = [render(k).encode() for _, k in day_one_kernels()]
    rng = random.Random(0)
    bad = 0
    t0 = time.monotonic()
    for _ in range(seeds * 4):
        data = mutate_bytes(rng.choice(texts), rng)
        try:
            parse(data)
        except IRError:
            pass
        except BaseException:
            bad += 1
    violations += bad
    print(f"{'program':<12} {seeds * 4:>7} {'':>9} {'':>8} {bad:>11} {time.monotonic() - t0:>8.1f}")
    return violations


def kills(work: Path, per_scenario: int, rows: int, tune: bool) -> int:
    """Section 2; returns the rows lost."""
    print(f"\n== 2. kill -9 ({load()})")
    print(f"{'command':<22} {'run s':>6} {'kills':>6} {'while running':>14} {'rows at stake':>14} {'rows lost':>10}")
    rng = random.Random(1)
    total_lost = 0
    for name, make in SCENARIOS.items():
        if name.startswith("tune") and not tune:
            continue
        scenario = make(work / "templates" / name.replace(" ", "-"), rows)
        full = timed_run(scenario, work / "run")
        killed = lost = 0
        for _ in range(per_scenario):
            was_running, loss = trial(scenario, work / "run", rng.uniform(0.2, full * 1.1))
            killed += was_running
            if loss is not None:
                lost += max(1, loss.rows)
                print(f"   LOSS {name}: {loss}")
        total_lost += lost
        print(f"{name:<22} {full:>6.1f} {per_scenario:>6} {killed:>14} {scenario.rows:>14} {lost:>10}")
    return total_lost


DISKFULL = ("test_disk_full_during_freeze_replaces_no_card_file", "test_disk_full_during_export_leaves_the_old_export",
            "test_disk_full_during_refresh_folds_nothing_and_removes_no_tune_file",
            "test_disk_full_during_a_tune_file_merge_keeps_the_old_tune_file",
            "test_disk_full_during_import_leaves_the_database_as_it_was")


def disk_full() -> int:
    """Section 3 (the fault suite's disk-full tests, each a command under `ulimit -f`); returns failures."""
    print(f"\n== 3. disk full ({load()})")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/faults/test_diskfull.py", "-k", " or ".join(DISKFULL)],
                          cwd=ROOT, capture_output=True, text=True, check=False)
    tail = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-300:]
    print(f"freeze, export, refresh-freeze, tune-file merge, import under a file-size limit: {tail}")
    return 0 if done.returncode == 0 else 1


ATHERIS_TARGET = """
import sys, tempfile
from pathlib import Path
import atheris
with atheris.instrument_imports(include=["emmy_core"]):
    from emmy_core.exchange.importer import import_into
from tests.faults.corpus import import_checked, primed_store
WORK = Path(tempfile.mkdtemp(prefix="emmy-atheris-"))
SOURCE = WORK / ("input" + sys.argv[1])

def one(data: bytes) -> None:
    SOURCE.write_bytes(data)
    import_checked(primed_store(), SOURCE)  # raises (a finding) on any rule broken

atheris.Setup([sys.argv[0], *sys.argv[2:]], one)
atheris.Fuzz()
"""


def coverage_guided(corpus: dict[str, Path], work: Path, runs: int) -> int:
    """Section 4: atheris over each JSON importer, seeded with the valid source; returns findings."""
    print(f"\n== 4. coverage-guided fuzzing, atheris ({load()})")
    try:
        import atheris  # noqa: F401
    except ImportError:
        print("atheris is not installed here (`pip install atheris` into the venv): skipped")
        return 0
    findings = 0
    for kind in JSON_KINDS:
        seeds = work / f"atheris-{kind}"
        seeds.mkdir(exist_ok=True)
        (seeds / "valid").write_bytes(corpus[kind].read_bytes())
        t0 = time.monotonic()
        done = subprocess.run([sys.executable, "-c", ATHERIS_TARGET, ".json", str(seeds), f"-runs={runs}",
                               "-max_len=65536", "-rss_limit_mb=4096", f"-artifact_prefix={work}/crash-{kind}-"],
                              cwd=ROOT, capture_output=True, text=True, check=False,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
        out = done.stdout + done.stderr
        ran = re.search(r"Done (\d+) runs", out)
        cov = re.findall(r"cov: (\d+)", out)
        found = done.returncode != 0
        findings += found
        print(f"{kind:<12} {ran.group(1) if ran else '?':>8} inputs, coverage {cov[-1] if cov else '?'} edges, "
              f"{'FINDING: ' + out[-400:] if found else 'no finding'} ({time.monotonic() - t0:.0f} s)")
    return findings


def _mixed(snap_or_pair: tuple[str, int], digests: dict[str, str], rows: dict[str, int]) -> bool:
    digest, n = snap_or_pair
    return digest not in digests or rows[digests[digest]] != n


def _swapper(a: Path, b: Path, out: Path, stop: Any, swaps: list[int], errors: list[BaseException]) -> None:
    """Exports the two stores into `out` in turn until `stop` is set (counting swaps, keeping errors)."""
    from emmy_core.exchange.export import export_db

    try:
        while not stop.is_set():
            export_db(b if swaps[0] % 2 == 0 else a, out)
            swaps[0] += 1
    except BaseException as exc:  # counted and shown by the caller
        errors.append(exc)


def export_race(work: Path, reads: int) -> int:
    """Section 5; returns the violations (mixed snapshots and failed reads)."""
    import threading

    import pyarrow.parquet as pq

    from emmy_core.exchange.export import MANIFEST, export_db, open_snapshot
    from tests.faults.test_export_race import two_stores

    print(f"\n== 5. export race ({load()})")
    folder = work / "race"
    folder.mkdir()
    a, b = two_stores(folder)
    digests = {export_db(a, folder / "ref-a")["digest"]: "a", export_db(b, folder / "ref-b")["digest"]: "b"}
    rows = {"a": open_snapshot(folder / "ref-a").tables["measurements"].num_rows,
            "b": open_snapshot(folder / "ref-b").tables["measurements"].num_rows}
    out = folder / "dataset"
    export_db(a, out)
    print(f"{'reader':<16} {'reads':>6} {'swaps':>6} {'mixed':>6} {'failed':>7} {'seconds':>8}")
    violations = 0
    for reader in ("snapshot", "by paths (old)"):
        stop, swaps, errors = threading.Event(), [0], []
        thread = threading.Thread(target=_swapper, args=(a, b, out, stop, swaps, errors))
        t0 = time.monotonic()
        thread.start()
        mixed = failed = 0
        try:
            done = 0
            while (done < reads or swaps[0] < 6) and done < 50 * reads and not errors:
                done += 1
                try:
                    if reader == "snapshot":
                        snap = open_snapshot(out)
                        pair = (snap.manifest["digest"], snap.tables["measurements"].num_rows)
                    else:
                        manifest = json.loads((out / MANIFEST).read_text())
                        pair = (manifest["digest"], pq.read_table(out / "measurements.parquet").num_rows)
                    mixed += _mixed(pair, digests, rows)
                except Exception:  # a read that fails mid-swap
                    failed += 1
        finally:
            stop.set()
            thread.join()
        failed += len(errors)
        if reader == "snapshot":
            violations += mixed + failed
        print(f"{reader:<16} {done:>6} {swaps[0]:>6} {mixed:>6} {failed:>7} {time.monotonic() - t0:>8.1f}")
    return violations


LOCKER = """
import sys, time, json
from emmy_core.chain.runlock import RunLockedError, run_lock
lock, log, wait = sys.argv[1], sys.argv[2], float(sys.argv[3])
notes = []
try:
    with run_lock(lock, wait_s=wait, say=notes.append):
        start = time.time()
        time.sleep(0.2)
        end = time.time()
    print(json.dumps({"start": start, "end": end, "notes": notes}))
except RunLockedError as exc:
    print(json.dumps({"refused": str(exc), "notes": notes}))
"""


def concurrent_chains(work: Path, chains: int) -> int:
    """Section 6; returns the violations (overlapping holders, a refusal without the holder, no stale note)."""
    print(f"\n== 6. concurrent chains ({load()})")
    lock = work / "chains" / "_data" / "chain.lock"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def start(wait: float) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-c", LOCKER, str(lock), "-", str(wait)], cwd=ROOT, text=True,
                                stdout=subprocess.PIPE, env=env)

    t0 = time.monotonic()
    procs = [start(60.0) for _ in range(chains)]
    runs = [json.loads(p.communicate(timeout=300)[0]) for p in procs]
    spans = sorted((r["start"], r["end"]) for r in runs if "start" in r)
    overlaps = sum(1 for (_, e1), (s2, _) in itertools.pairwise(spans) if s2 < e1)
    waited = sum(1 for r in runs if any("waiting" in n for n in r["notes"]))
    holder = subprocess.Popen([sys.executable, "-c", LOCKER.replace("time.sleep(0.2)", "time.sleep(30)"),
                               str(lock), "-", "0"], cwd=ROOT, text=True, stdout=subprocess.PIPE, env=env)
    time.sleep(3.0)
    refused = json.loads(start(0.0).communicate(timeout=120)[0])
    named = "refused" in refused and f"PID {holder.pid}" in refused["refused"]
    holder.kill()  # kill -9: the lock's record stays, the flock goes with the process
    holder.wait()
    after = json.loads(start(0.0).communicate(timeout=120)[0])
    stale = "start" in after and any("taken over" in n and f"PID {holder.pid}" in n for n in after["notes"])
    violations = overlaps + (len(spans) != chains) + (not named) + (not stale)
    print(f"{chains} chains at once: {len(spans)} ran, {waited} waited, {overlaps} overlapping; a chain that may "
          f"not wait {'refused naming the holder' if named else 'DID NOT refuse naming the holder'}; a holder "
          f"killed -9 {'was taken over with a note' if stale else 'WAS NOT taken over with a note'} "
          f"({time.monotonic() - t0:.1f} s)")
    return violations


def special_inputs(work: Path) -> int:
    """Section 7; returns the violations (hangs, acceptances, raw exceptions)."""
    print(f"\n== 7. special input files ({load()})")
    folder = work / "special"
    folder.mkdir()
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "tests.faults.special_inputs", str(folder)], cwd=ROOT,
                          capture_output=True, text=True,
                          timeout=600, check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})
    lines = [line.split("\t") for line in done.stdout.splitlines() if line.count("\t") == 2]
    bad = [x for x in lines if not x[2].startswith("refused")]
    for name, kind, outcome in bad:
        print(f"   VIOLATION {name} given {kind}: {outcome}")
    if done.returncode != 0:
        print(f"   the readers' process failed: {done.stderr[-400:]}")
    print(f"{len(lines)} reads of a FIFO, /dev/zero or a folder: {len(lines) - len(bad)} refused at once, "
          f"{len(bad)} violations ({time.monotonic() - t0:.1f} s)")
    return len(bad) + (done.returncode != 0) + (len(lines) == 0)


BOMB = """
import json, resource, sys, time
import numpy as np
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
from emmy_core.prior import PriorError, load_prior
t0 = time.monotonic()
try:
    prior = load_prior(sys.argv[1])
    rows = np.random.default_rng(0).normal(size=(64, len(prior.features)))
    prior.score_rows(rows)
    outcome = "loaded and scored in bounded memory"
except PriorError as exc:
    outcome = "refused: " + str(exc)[:160]
except MemoryError as exc:
    outcome = "VIOLATION MemoryError"
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"outcome": outcome, "seconds": time.monotonic() - t0, "peak_mib": peak}))
"""


def bomb_artifact(path: Path) -> Path:
    """The artifact of the issue: the installed prior's features, a depth-16 tree and 99,999 constant trees."""
    from emmy_core.prior import installed_prior_path

    doc = json.loads(installed_prior_path().read_text())
    deep = {"splits": [{"split_type": "FloatFeature", "float_feature_index": i % len(doc["features"]),
                        "border": 0.5 + i, "split_index": i} for i in range(16)],
            "leaf_values": [0.0] * (1 << 16)}
    flat = {"splits": [], "leaf_values": [0.0]}
    doc["model"]["oblivious_trees"] = [deep, *([flat] * 99_999)]
    path.write_text(json.dumps(doc))
    return path


def prior_bomb(work: Path) -> int:
    """Section 8; returns 1 when the bomb is neither refused nor loaded in bounded memory."""
    print(f"\n== 8. prior bomb ({load()})")
    bomb = bomb_artifact(work / "bomb.json")
    done = subprocess.run([sys.executable, "-c", BOMB, str(bomb)], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        result = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        print(f"   VIOLATION: the loader's process died (rc {done.returncode}): {done.stderr.strip()[-300:]}")
        return 1
    print(f"{bomb.stat().st_size / 2**20:.1f} MiB artifact: {result['outcome']} ({result['seconds']:.1f} s, "
          f"peak {result['peak_mib']:.0f} MiB, under a 4 GiB address-space limit)")
    return int("VIOLATION" in result["outcome"])


def silent_peers() -> int:
    """Section 9: loopback peers that accept and never speak, speak HTTP, or refuse, as a `--scheduler tcp://`
    and as an http:// folder; each must be given up on within 30 s or refused by name. Returns violations."""
    from emmy_core.compute.scheduler import ComputeError, probe_dask
    from emmy_core.fileio.urlfolder import UrlFolderError, read_pointer
    from tests.faults.peers import closed_port, http_server, silent_listener

    print(f"\n== 9. silent and foreign network peers ({load()})")
    violations = 0
    cases = [("scheduler, silent", silent_listener, lambda port: probe_dask(f"tcp://127.0.0.1:{port}")),
             ("scheduler, HTTP server", http_server, lambda port: probe_dask(f"tcp://127.0.0.1:{port}")),
             ("http URL, silent", silent_listener, lambda port: read_pointer(f"http://127.0.0.1:{port}/ds")),
             ("http URL, refused", None, lambda port: read_pointer(f"http://127.0.0.1:{port}/ds"))]
    for name, peer, call in cases:
        t0 = time.monotonic()
        try:
            if peer is None:
                call(closed_port())
            else:
                with peer() as port:
                    call(port)
            outcome = "ACCEPTED"
        except (ComputeError, UrlFolderError) as exc:
            outcome = "refused: " + str(exc)[:100]
        except BaseException as exc:
            outcome = f"RAW {type(exc).__name__}: {str(exc)[:80]}"
        took = time.monotonic() - t0
        bad = not outcome.startswith("refused") or took > 30
        violations += bad
        print(f"   {'VIOLATION ' if bad else ''}{name}: {outcome} ({took:.1f} s)")
    return violations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=500, help="hostile inputs per source kind")
    parser.add_argument("--kills", type=int, default=10, help="kills per command")
    parser.add_argument("--rows", type=int, default=8000, help="rows per source in the kill scenarios")
    parser.add_argument("--no-tune", action="store_true", help="leave the tune out of the kills (slow: compiles)")
    parser.add_argument("--atheris", type=int, default=0, help="coverage-guided inputs per importer (0: off)")
    parser.add_argument("--race-reads", type=int, default=300, help="snapshot reads racing the exports")
    parser.add_argument("--chains", type=int, default=6, help="chains taking the workspace lock at once")
    args = parser.parse_args()
    started = time.monotonic()
    print(f"bench/faults.py ({load()})")
    with tempfile.TemporaryDirectory(prefix="emmy-faults-") as tmp:
        work = Path(tmp)
        corpus = build_corpus(work / "corpus")
        violations = hostile_inputs(corpus, work, args.seeds)
        lost = kills(work, args.kills, args.rows, not args.no_tune)
        full = disk_full()
        findings = coverage_guided(corpus, work, args.atheris) if args.atheris else 0
        race = export_race(work, args.race_reads)
        chains = concurrent_chains(work, args.chains)
        special = special_inputs(work)
        bomb = prior_bomb(work)
        peers = silent_peers()
    peak = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
               resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
    print(f"\nviolations of the import rules {violations}; rows lost to kills {lost}; disk-full failures {full}; "
          f"atheris findings {findings}; export-race violations {race}; concurrent-chain violations {chains}; "
          f"special-input violations {special}; prior-bomb violations {bomb}; network-peer violations {peers}; "
          f"{time.monotonic() - started:.0f} s; "
          f"peak memory {peak:.0f} MiB ({load()})")
    sys.exit(1 if violations or lost or full or findings or race or chains or special or bomb or peers else 0)


if __name__ == "__main__":
    main()
