"""`emmy fit … --tracking-uri http://127.0.0.1:9` (nothing listening) does not hang: tracking gives up within
seconds, says so, and the artifact and metrics are kept."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.compute.conftest import toy_export  # noqa: F401  (a toy export: a fit on it takes seconds)

ROOT = Path(__file__).resolve().parents[2]
FIT = """
import sys, time
from emmy_core.prior.dataset import read_dataset
from emmy_core.prior.fit import fit_dataset
from emmy_core.prior.tracking import TrackingError
from emmy_core.prior.training import Params
data = read_dataset(sys.argv[1])
start = time.monotonic()
try:
    fit_dataset(data, sys.argv[2], folds=2, params=Params(iterations=10, depth=3), tracking_uri=sys.argv[4],
                fits_dir=sys.argv[3])
except TrackingError as exc:
    print(f"tracking-seconds {time.monotonic() - start:.1f}")
    print(exc)
    sys.exit(3)
"""


def test_an_unreachable_tracking_server_times_out_says_so_and_keeps_the_artifact(
        toy_export: Path, tmp_path: Path) -> None:  # noqa: F811
    out = tmp_path / "prior.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_HTTP_REQUEST")}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", FIT, str(toy_export), str(out), str(tmp_path / "fits"),
                           "http://127.0.0.1:9"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          check=False, env={**env, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 3, (done.stdout + done.stderr)[-3000:]
    assert time.monotonic() - started < 240
    assert "it is kept" in done.stdout and "tracking gave up" in done.stdout and str(out) in done.stdout
    assert out.is_file() and list((tmp_path / "fits").glob("*/metrics.json"))


def test_tracking_over_http_is_bounded_unless_the_user_set_the_bounds(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from emmy_core.prior.tracking import HTTP_TIMEOUT_S, bound_http

    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_TIMEOUT", raising=False)
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", raising=False)
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", raising=False)
    assert bound_http("sqlite:///x.db") == ""
    assert "MLFLOW_HTTP_REQUEST_TIMEOUT" not in os.environ
    bound_http("http://127.0.0.1:9")
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == str(HTTP_TIMEOUT_S)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "60")
    bound_http("http://127.0.0.1:9")
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "60"
