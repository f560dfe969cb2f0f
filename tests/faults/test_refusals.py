"""What used to be accepted silently, or refused with a traceback or a misleading message, on the data side:
each is refused clearly (or noted where a person would want to know), naming the file, record and field."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from emmy_core.cli.main import app
from emmy_core.fileio.sourcefile import SourceError
from emmy_core.prior import PriorError, installed_prior_path, load_prior
from emmy_core.prior.artifact import artifact_text
from tests.eval.conftest import cache_doc, caches_export  # noqa: F401  (small exports from Kernel Tuner caches)
from tests.prior.conftest import freeze_export  # noqa: F401  (the repository freeze as an export)

ROOT = Path(__file__).resolve().parents[2]
BIG = int("9" * 400)


def _installed_doc() -> dict:
    return dict(load_prior(installed_prior_path()).doc)


def _write(path: Path, doc: dict) -> Path:
    path.write_text(artifact_text(doc))
    return path


# ---- priors ------------------------------------------------------------------------------------------

def test_a_feature_version_written_as_text_is_refused_as_text_not_as_another_version(tmp_path: Path) -> None:
    doc = _installed_doc()
    doc["feature_version"] = str(doc["feature_version"])
    with pytest.raises(PriorError) as info:
        load_prior(_write(tmp_path / "p.json", doc))
    text = str(info.value)
    assert f"must be an integer, not str '{doc['feature_version']}'" in text and "written with" not in text


def test_a_prior_over_feature_names_this_emmy_does_not_compute_is_refused(tmp_path: Path) -> None:
    doc = _installed_doc()
    doc["features"] = [f"zz.{n}" for n in doc["features"]]
    with pytest.raises(PriorError, match="does not compute"):
        load_prior(_write(tmp_path / "p.json", doc))


def test_a_prior_with_no_trees_is_refused_not_credited_as_the_prior_tier(tmp_path: Path) -> None:
    doc = _installed_doc()
    doc["model"] = {**doc["model"], "oblivious_trees": []}
    with pytest.raises(PriorError, match="no trees"):
        load_prior(_write(tmp_path / "p.json", doc))


def test_an_explicit_prior_that_is_refused_is_an_error_exit_not_a_warning(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    for command in (["compile", "--model", "mlp", "--prior", str(bad)],
                    ["explain", "--model", "mlp", "--prior", str(bad)]):
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 2, (command, result.output)
        assert "--prior" in result.output and str(bad) in result.output and "Traceback" not in result.output


# ---- fit ---------------------------------------------------------------------------------------------

def test_a_seed_over_2_to_the_64_is_refused_by_the_command_line(freeze_export: Path, tmp_path: Path) -> None:  # noqa: F811
    result = CliRunner().invoke(app, ["fit", str(freeze_export), str(tmp_path / "p.json"), "--seed", str(2**64 + 1),
                                      "--tracking-uri", "off"])
    assert result.exit_code == 2 and "--seed" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize("problem", ["missing", "malformed"])
def test_a_cards_file_is_read_even_when_the_export_describes_every_card(freeze_export: Path, tmp_path: Path,  # noqa: F811
                                                                        problem: str) -> None:
    from emmy_core.prior.dataset import read_dataset
    from emmy_core.targets import CardTableError

    cards = tmp_path / "cards.json"
    if problem == "malformed":
        cards.write_text("{not json")
    with pytest.raises(CardTableError, match=str(cards)):
        read_dataset(freeze_export, cards)


def test_a_fit_from_pools_of_one_kernel_is_refused_zero_folds(caches_export: Callable, tmp_path: Path) -> None:  # noqa: F811
    from emmy_core.prior.dataset import read_dataset
    from emmy_core.prior.fit import fit_dataset

    export, _ = caches_export({"only": [(1, 2.0), (2, 1.0), (3, 3.0)]})
    with pytest.raises(PriorError, match="0 folds"):
        fit_dataset(read_dataset(export), tmp_path / "p.json", tracking_uri="off", fits_dir=tmp_path / "fits")
    assert not (tmp_path / "p.json").exists()


def test_a_fit_from_pools_whose_every_row_failed_is_refused(caches_export: Callable, tmp_path: Path) -> None:  # noqa: F811
    export, _ = caches_export({"a": [(1, "RuntimeFailedConfig"), (2, "CompilationFailedConfig")],
                               "b": [(1, "RuntimeFailedConfig"), (2, "RuntimeFailedConfig")]})
    result = CliRunner().invoke(app, ["fit", str(export), str(tmp_path / "p.json"), "--tracking-uri", "off"])
    assert result.exit_code == 2 and "every measured row failed" in result.output
    assert not (tmp_path / "p.json").exists()


# ---- reports and card files ----------------------------------------------------------------------------

def _report(tmp_path: Path, name: str, top1: object) -> Path:
    from emmy_core.eval.report import REPORT_FORMAT, REPORT_VERSION

    doc = {"format": REPORT_FORMAT, "version": REPORT_VERSION, "feature_version": 1, "dataset_digest": "d",
           "pools": "measured", "prior": {"source": "p", "provenance": {}}, "minimum_sizes": {},
           "mean": {"tau": -0.5, "top1": 1.25}, "by_card": {"c / deploy": {"top1": 1.25}},
           "by_family": {"matmul": {"top1": 1.25}}, "forks": 1,
           "undescribed_pools": 0, "undescribed_cards": [], "extern_order": False, "per_pool": []}
    path = tmp_path / name
    path.write_text(json.dumps(doc).replace('"top1": 1.25}, "by_card"', f'"top1": {top1}}}, "by_card"'))
    return path


@pytest.mark.parametrize("value", ["1e999", "-2.5", str(BIG)])
def test_eval_compare_refuses_infinite_negative_and_400_digit_figures(tmp_path: Path, value: str) -> None:
    good = _report(tmp_path, "a.json", "1.25")  # tau -0.5 is a correlation: allowed
    bad = _report(tmp_path, "b.json", value)
    result = CliRunner().invoke(app, ["eval", "compare", str(good), str(bad)])
    assert result.exit_code == 2 and str(bad) in result.output and "$.mean.top1" in result.output
    assert "Traceback" not in result.output and "OverflowError" not in result.output


def test_a_400_digit_integer_in_a_card_file_is_refused_naming_the_field(tmp_path: Path) -> None:
    from emmy_core.targets import CardTableError
    from emmy_core.targets.table import TABLE_PATH, load_table

    doc = json.loads(TABLE_PATH.read_text())
    entry = {**doc["cards"][0], "name": "My card", "sms": BIG}
    path = tmp_path / "cards.json"
    path.write_text(json.dumps({"format": doc["format"], "version": doc["version"], "cards": [entry]}))
    with pytest.raises(CardTableError, match="'sms' is an integer of 400 digits"):
        load_table(path)


def test_a_400_digit_integer_in_a_source_number_field_is_refused_not_an_overflow() -> None:
    from emmy_core.fileio.sourcefile import Fields

    with pytest.raises(SourceError, match="400 digits"):
        Fields("f.json", "$", {"x": BIG}).number("x")


# ---- freezes -----------------------------------------------------------------------------------------

def test_a_freeze_file_holding_another_cards_name_is_noted_not_skipped_silently(tmp_path: Path) -> None:
    from emmy_core.evidence.freeze import golden_source

    shutil.copy(ROOT / "freezes" / "amd-epyc-avx-512-x2.json", tmp_path / "nvidia-h200.json")
    _, notes = golden_source("NVIDIA H200", "deploy", tmp_path)
    assert any("nvidia-h200.json" in n and "'AMD EPYC AVX-512 x2'" in n and "not 'NVIDIA H200'" in n for n in notes), notes


# ---- the main job after a failed chain ------------------------------------------------------------------

def test_after_a_failed_chain_the_main_job_marks_the_old_evaluation_stale_with_the_cause(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import os

    from emmy_core.chain.chainstatus import write_status
    from emmy_core.chain.evaluation import Evaluation, write_evaluation
    from emmy_core.cli.main_job import evaluation_section
    from tests.chain.reports import report

    evaluation = tmp_path / "evaluation"
    write_evaluation(Evaluation(report(1.0, "the old prior"), None, "", 0.02), evaluation)
    os.utime(evaluation / "report.json", (1_000_000_000, 1_000_000_000))  # written long before the run
    write_status(tmp_path, "run-1", False, "step dataset: freezes/x.json: not valid JSON at line 111 column 3")
    evaluation_section(evaluation)
    out = " ".join(capsys.readouterr().out.split())  # the report wraps at 120 columns
    assert "STOPPED: step dataset: freezes/x.json: not valid JSON at line 111" in out
    assert "STALE" in out and out.index("STALE") < out.index("prior the old prior")
    write_status(tmp_path, "run-2", True)
    evaluation_section(evaluation)
    assert "STALE" not in capsys.readouterr().out


def test_the_chain_summary_names_the_innermost_cause_of_a_failed_step() -> None:
    import dagster as dg

    from pipelines.__main__ import failure_cause

    @dg.asset
    def broken() -> None:
        raise SourceError("freezes/x.json", "", "", "not valid JSON: Expecting value at line 111 column 3")

    result = dg.materialize([broken], raise_on_error=False)
    assert not result.success
    cause = failure_cause(result)
    assert cause.startswith("step broken:") and "freezes/x.json" in cause and "line 111" in cause
    assert "Error occurred while executing" not in cause
