"""The chain has one home: the assets, `emmy fit` and `emmy main` call the same chain functions (patch the
judge once and all three say what the patch says), and no asset module reaches up into `pipelines`."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import dagster as dg
import pytest
from typer.testing import CliRunner

from emmy_core.eval.verdict import Verdict
from tests.eval.conftest import caches_export  # noqa: F401  (small exports from Kernel Tuner caches)
from tests.eval.test_cli import FIT

ROOT = Path(__file__).resolve().parents[2]
ASSETS = sorted((ROOT / "assets").glob("*.py"))
PATCHED = "the patched judge has spoken"


def test_the_assets_emmy_fit_and_emmy_main_call_the_same_chain_functions(
        caches_export: Callable, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    from assets.evaluation import candidate_no_worse, evaluation
    from assets.resources import ComputeScheduler, EmmyPaths, MLflowTracking
    from emmy_core.chain import evaluation as ev
    from emmy_core.cli.main import app

    calls: list[str] = []

    def judge(e: ev.Evaluation) -> Verdict:
        calls.append(e.candidate["prior"]["source"])
        return Verdict(False, PATCHED, None, None, e.tolerance)

    monkeypatch.setattr(ev, "judge", judge)
    monkeypatch.chdir(tmp_path)  # emmy fit's fit folder goes under ./_tune/fits
    export, _ = caches_export(FIT)
    data, fits = tmp_path / "data", tmp_path / "fits"
    data.mkdir()
    export.rename(data / "dataset")
    fitted = CliRunner().invoke(app, ["fit", str(data / "dataset"), str(fits / "candidate.json"), "--pools",
                                      "measured", "--folds", "2", "--tracking-uri", "off"])
    assert fitted.exit_code == 0, fitted.output
    assert f"keep the installed ({PATCHED})" in fitted.output

    paths = EmmyPaths(data_dir=str(data), fits_dir=str(fits), installed_prior=str(tmp_path / "installed.json"))
    with dg.instance_for_test() as instance:
        result = dg.materialize([evaluation, candidate_no_worse], instance=instance, raise_on_error=False,
                                resources={"paths": paths, "mlflow": MLflowTracking(tracking_uri="sqlite:///x.db"),
                                           "compute": ComputeScheduler()})
    meta = result.asset_materializations_for_node("evaluation")[0].metadata
    assert meta["verdict"].value == PATCHED  # type: ignore[attr-defined]
    (check,) = result.get_asset_check_evaluations()
    assert not check.passed and check.description == PATCHED

    shown = CliRunner().invoke(app, ["main", "--data", str(data), "--model", "mlp"])
    assert shown.exit_code == 0, shown.output
    assert f"verdict: keep the installed prior ({PATCHED})" in shown.output
    assert len(calls) == 4  # emmy fit, the asset, its check, emmy main


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at any depth (imports inside functions included)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


def test_no_asset_module_imports_pipelines() -> None:
    assert ASSETS
    for path in ASSETS:
        reaching_up = sorted(m for m in imported_modules(path) if m == "pipelines" or m.startswith("pipelines."))
        assert not reaching_up, f"{path.name} imports {reaching_up}: resources live in assets/, wiring in pipelines/"


def test_an_asset_module_is_a_thin_wrapper_under_60_lines() -> None:
    for path in ASSETS:
        lines = len(path.read_text().splitlines())
        assert lines < 60, f"{path.name} has {lines} lines: its work belongs in emmy_core.chain"
