"""The compile and bench paths, the prior (scoring; the fit imports its libraries lazily) and the evaluation
import without duckdb, polars, catboost, mlflow or dagster (DESIGN.md 2)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("duckdb", "polars", "catboost", "mlflow", "dagster", "pyarrow", "sklearn", "scipy")
LIGHT_PACKAGES = ("emmy_core.ir", "emmy_core.graph", "emmy_core.knobs", "emmy_core.targets",
                  "emmy_core.codegen", "emmy_core.bench", "emmy_core.prior", "emmy_core.evidence",
                  "emmy_core.compiler", "emmy_core.eval", "emmy_core.search")

SCRIPT = textwrap.dedent(
    """
    import importlib, importlib.abc, pkgutil, sys

    HEAVY = {heavy!r}

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in HEAVY:
                raise ImportError(f"blocked heavy module {{name}}")
            return None

    sys.meta_path.insert(0, Block())
    imported = []
    for pkg_name in {packages!r}:
        pkg = importlib.import_module(pkg_name)
        imported.append(pkg_name)
        for info in pkgutil.walk_packages(pkg.__path__, pkg_name + "."):
            importlib.import_module(info.name)
            imported.append(info.name)
    leaked = sorted(m for m in sys.modules if m.split(".")[0] in HEAVY)
    assert not leaked, leaked
    print(len(imported))
    """
)


def test_compile_and_bench_paths_import_without_heavy_modules() -> None:
    script = SCRIPT.format(heavy=HEAVY, packages=LIGHT_PACKAGES)
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={"PATH": "/usr/bin:/bin", "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert int(proc.stdout.strip().splitlines()[-1]) >= len(LIGHT_PACKAGES)


def test_the_blocker_really_blocks() -> None:
    script = SCRIPT.format(heavy=HEAVY, packages=("emmy_core.ir",)) + "\nimport duckdb\n"
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "blocked heavy module duckdb" in proc.stderr


def test_importing_emmy_core_loads_nothing_until_compile_is_used() -> None:
    script = (
        "import sys\n"
        "import emmy_core\n"
        "assert 'torch' not in sys.modules and 'emmy_core.compiler' not in sys.modules, sorted(sys.modules)\n"
        "compile = emmy_core.compile\n"
        "from emmy_core.compiler import compile as direct\n"
        "assert compile is direct and callable(compile)\n"
        "leaked = sorted(m for m in sys.modules if m.split('.')[0] in " + repr(HEAVY) + ")\n"
        "assert not leaked, leaked\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
