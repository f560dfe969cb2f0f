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
5. the prior bomb: a 4 MB artifact of one depth-16 tree beside 99,999 constant trees, loaded and a
   pool scored in a child process under an address-space limit (it asked numpy for 48.8 GiB).

Run: .venv/bin/python bench/faults.py [--seeds 500] [--kills 10] [--rows 8000] [--no-tune] [--atheris 20000]
"""

from __future__ import annotations

import argparse
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
    from emmy_core.store.importer import import_into
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


BOMB_LIMIT_BYTES = 8 * 2**30  # the child's address space (imports included)
BOMB_CHILD = """
import json, resource, sys, time
import numpy as np
from emmy_core.prior.artifact import installed_prior_path, load_prior
doc = json.loads(installed_prior_path().read_text())
deep = {"leaf_values": [0.5] * 2**16, "splits": [{"border": 0.5 + i, "float_feature_index": 0, "split_index": i,
                                                  "split_type": "FloatFeature"} for i in range(16)]}
doc["model"]["oblivious_trees"] = [deep] + [{"leaf_values": [0.25], "splits": None}] * 99_999
with open(sys.argv[1], "w") as f:
    json.dump(doc, f)
t0 = time.monotonic()
prior = load_prior(sys.argv[1])
scores = prior.trees.predict(np.zeros((32, prior.trees.n_features)))
print(f"{time.monotonic() - t0:.1f} {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f}")
"""


def prior_bomb(work: Path) -> int:
    """Section 5: the bomb loaded and a pool scored in a child under BOMB_LIMIT_BYTES; returns failures."""
    print(f"\n== 5. prior bomb ({load()})")
    path = work / "bomb.json"

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (BOMB_LIMIT_BYTES, BOMB_LIMIT_BYTES))

    done = subprocess.run([sys.executable, "-c", BOMB_CHILD, str(path)], cwd=ROOT, capture_output=True, text=True,
                          check=False, preexec_fn=limit, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if done.returncode != 0:
        print(f"FAILED under a {BOMB_LIMIT_BYTES // 2**30} GiB address space: {done.stderr.strip()[-300:]}")
        return 1
    seconds, peak = done.stdout.split()
    print(f"{path.stat().st_size / 1e6:.1f} MB artifact (one depth-16 tree, 99,999 constant trees): loaded and a pool "
          f"of 32 scored in {seconds} s, peak {peak} MiB, under a {BOMB_LIMIT_BYTES // 2**30} GiB address space")
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=500, help="hostile inputs per source kind")
    parser.add_argument("--kills", type=int, default=10, help="kills per command")
    parser.add_argument("--rows", type=int, default=8000, help="rows per source in the kill scenarios")
    parser.add_argument("--no-tune", action="store_true", help="leave the tune out of the kills (slow: compiles)")
    parser.add_argument("--atheris", type=int, default=0, help="coverage-guided inputs per importer (0: off)")
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
        bombs = prior_bomb(work)
    peak = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
               resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
    print(f"\nviolations of the import rules {violations}; rows lost to kills {lost}; disk-full failures {full}; "
          f"atheris findings {findings}; prior-bomb failures {bombs}; {time.monotonic() - started:.0f} s; peak memory {peak:.0f} MiB ({load()})")
    sys.exit(1 if violations or lost or full or findings or bombs else 0)


if __name__ == "__main__":
    main()
