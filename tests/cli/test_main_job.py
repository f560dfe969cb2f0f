"""`emmy main` prints what the chain left: the evaluation, the forks with their evidence, where to look."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from emmy_core.chain.evaluation import write_evaluation
from emmy_core.cli.main import app
from emmy_core.exchange.export import export_db
from emmy_core.exchange.importer import import_db
from tests.chain.reports import evaluation

ROOT = Path(__file__).resolve().parents[2]


def test_on_a_fresh_machine_it_says_what_is_missing_and_still_shows_the_forks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    result = CliRunner().invoke(app, ["main", "--data", str(tmp_path), "--model", "mlp"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "no evaluation in" in out and "`make run`" in out
    assert "forks by tier:" in out
    assert "3 kernels, 3 distinct" in out or "kernels," in out
    assert "dagster dev -m pipelines.definitions -h 127.0.0.1" in out
    assert "mlflow ui --backend-store-uri sqlite:///_tune/mlflow.db" in out


def test_the_mlflow_hint_names_the_store_the_fits_were_tracked_in(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/elsewhere.db")
    result = CliRunner().invoke(app, ["main", "--data", str(tmp_path), "--model", "mlp"])
    assert result.exit_code == 0, result.output
    assert f"mlflow ui --backend-store-uri sqlite:///{tmp_path}/elsewhere.db" in " ".join(result.output.split())


def test_it_reads_the_evaluation_and_the_tuning_database_the_chain_left(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "120")  # the width a terminal without its own gives; narrower is tested apart
    db = tmp_path / "tune.db"
    assert all(o.ok for o in import_db(db, sorted((ROOT / "freezes").glob("*.json")), fresh=True))
    export_db(db, tmp_path / "dataset")
    write_evaluation(evaluation(1.1, 1.0), tmp_path / "evaluation")
    result = CliRunner().invoke(app, ["main", "--data", str(tmp_path), "--model", "llama_block"])
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.output.splitlines() if not line.startswith("    .venv/bin/python -c")) <= 120
    out = " ".join(result.output.split())  # long lines wrap at 120 columns
    assert "A = installed: prior installed.json" in out and "all pools" in out
    assert "verdict: keep the installed prior (candidate top1 slowdown 1.1000 is worse" in out
    assert f"report and plots: {tmp_path / 'evaluation'}/" in out
    assert "12 kernels, 9 distinct" in out
    assert "forks by tier:" in out
    assert "Intel(R) Xeon(R) Processor AVX-512 x2" in out


def test_a_bad_shape_is_refused() -> None:
    result = CliRunner().invoke(app, ["main", "--shape", "B=x"])
    assert result.exit_code == 2 and "--shape" in result.output


@pytest.mark.parametrize(("args", "says"), [(["--setting", "x"], "--setting 'x': known settings"),
                                            (["--model", "nope"], "unknown model 'nope'")])
def test_a_bad_setting_or_model_is_refused_before_any_of_the_report_is_printed(
        tmp_path: Path, args: list[str], says: str) -> None:
    write_evaluation(evaluation(1.1, 1.0), tmp_path / "evaluation")
    result = CliRunner().invoke(app, ["main", "--data", str(tmp_path), *args])
    assert result.exit_code == 2 and says in result.output and "Traceback" not in result.output
    assert "verdict" not in result.output and "==" not in result.output, result.output


def test_without_a_freeze_or_a_tuning_database_the_forks_fall_past_the_measured_tiers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMMY_TUNING_DB", str(tmp_path / "no-tuning.db"))
    empty = tmp_path / "no-freeze"
    empty.mkdir()
    monkeypatch.setenv("EMMY_FREEZES", str(empty))
    result = CliRunner().invoke(app, ["main", "--data", str(tmp_path / "d"), "--model", "mlp"])
    assert result.exit_code == 0, result.output
    assert "forks by tier: golden 0, local 0, " in result.output and "6 fork(s) fell past" in result.output


def test_it_says_truthfully_whether_the_candidate_is_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    from emmy_core.chain.paths import ChainPaths
    from emmy_core.cli.main_job import install_line
    from emmy_core.prior import installed_prior_path

    monkeypatch.chdir(tmp_path)
    paths = ChainPaths(installed_prior=tmp_path / "installed.json")
    paths.candidate.parent.mkdir(parents=True)
    shutil.copyfile(installed_prior_path(), paths.candidate)
    shutil.copyfile(installed_prior_path(), paths.installed)
    install_line(paths)
    assert "installed: yes, the candidate is the installed prior" in capsys.readouterr().out
    doc = json.loads(paths.candidate.read_text())
    doc["provenance"]["seed"] += 1  # another fit: not the installed prior
    paths.candidate.write_text(json.dumps(doc))
    install_line(paths)
    out = " ".join(capsys.readouterr().out.split())  # wrapped at 120 columns
    assert "installed: no" in out and "`make run` never installs" in out
