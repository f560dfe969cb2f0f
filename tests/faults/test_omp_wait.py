"""#45: Emmy's OpenMP threads yield under load. `import emmy_core` before torch asks them to sleep rather than spin
between kernels (OMP_WAIT_POLICY=PASSIVE, read once when torch loads libgomp), never overrides a policy the user
set, and where torch loaded first the compile says once that its threads will spin and what to do."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from emmy_core import threads

ROOT = Path(__file__).resolve().parents[2]
SHOW = "import os; print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('GOMP_SPINCOUNT'))"


def _run(code: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in (*threads.SET_BY_USER, threads.OPT_OUT)}
    out = subprocess.run([sys.executable, "-c", code], env={**clean, **env}, cwd=ROOT, capture_output=True, text=True,
                         timeout=120, check=True)
    return out.stdout.strip()


def test_importing_emmy_core_before_torch_makes_openmp_threads_sleep() -> None:
    assert _run(f"import emmy_core, torch; {SHOW}") == "PASSIVE None"


def test_a_policy_the_user_chose_or_an_opt_out_is_kept() -> None:
    assert _run(f"import emmy_core; {SHOW}", GOMP_SPINCOUNT="1000") == "None 1000"
    assert _run(f"import emmy_core; {SHOW}", OMP_WAIT_POLICY="ACTIVE") == "ACTIVE None"
    assert _run(f"import emmy_core; {SHOW}", EMMY_OMP_WAIT="inherit") == "None None"


def test_after_torch_loaded_openmp_nothing_is_set_that_could_not_take_effect() -> None:
    code = f"import torch, emmy_core; from emmy_core.threads import spinning; {SHOW}; print(spinning())"
    assert _run(code).splitlines() == ["None None", "True"]


def test_a_compile_whose_threads_will_spin_warns_once(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in threads.SET_BY_USER:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(threads, "_warned", [])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        threads.warn_if_spinning()
        threads.warn_if_spinning()
    mine = [w for w in caught if issubclass(w.category, threads.SpinningThreadsWarning)]
    assert len(mine) == 1 and "OMP_WAIT_POLICY=PASSIVE" in str(mine[0].message)
    monkeypatch.setenv("EMMY_OMP_WAIT", "inherit")
    monkeypatch.setattr(threads, "_warned", [])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        threads.warn_if_spinning()
