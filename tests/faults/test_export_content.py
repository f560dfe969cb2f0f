"""An export whose hashes match but whose content is nonsense: every reader refuses it, naming the file, the
table, the row and the column; `emmy db check` on it reports the same; `emmy fit` writes no prior from it."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from emmy_core.cli.main import app
from emmy_core.exchange.check_export import check_export
from emmy_core.exchange.export import open_snapshot
from emmy_core.fileio.sourcefile import SourceError
from tests.faults.exports import CORRUPTIONS, corrupted_copy
from tests.prior.conftest import freeze_export  # noqa: F401  (the repository freeze as an export)


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_a_reader_refuses_export_content_no_store_could_hold_naming_file_table_row_and_column(
        freeze_export: Path, tmp_path: Path, name: str) -> None:  # noqa: F811
    from emmy_core.prior.dataset import read_dataset

    bad, table, column = corrupted_copy(freeze_export, tmp_path / "bad", name)
    open_snapshot(bad, content=False)  # the hashes match: only the content tells
    with pytest.raises(SourceError) as info:
        read_dataset(bad)
    err = info.value
    assert err.file == str(bad / f"{table}.parquet"), str(err)
    assert err.record.startswith(table) and err.field == column, str(err)
    if name != "measured_as_strings":  # a column of the wrong type is named for the whole column
        assert " row " in err.record, str(err)


@pytest.mark.parametrize("name", ["negative_time", "duplicated_pool_rows", "golden_of_an_absent_schedule"])
def test_emmy_db_check_on_a_dataset_reports_the_content_a_reader_refuses(
        freeze_export: Path, tmp_path: Path, name: str) -> None:  # noqa: F811
    bad, table, column = corrupted_copy(freeze_export, tmp_path / "bad", name)
    report = check_export(bad)
    assert not report.ok and report.counts["export_content"] >= 1
    assert any(f"{table}.parquet" in e and column in e for e in report.examples["export_content"])
    result = CliRunner().invoke(app, ["db", "check", "--db", str(bad)])
    assert result.exit_code == 1 and "export_content" in result.output and f"{table}.parquet" in result.output


def test_a_clean_export_has_no_content_problem(freeze_export: Path) -> None:  # noqa: F811
    assert check_export(freeze_export).counts["export_content"] == 0


def test_emmy_fit_writes_no_prior_from_nonsense_content(freeze_export: Path, tmp_path: Path) -> None:  # noqa: F811
    bad, _, _ = corrupted_copy(freeze_export, tmp_path / "bad", "nan_time")
    out = tmp_path / "prior.json"
    result = CliRunner().invoke(app, ["fit", str(bad), str(out), "--tracking-uri", "off"])
    assert result.exit_code == 2 and "pools.parquet" in result.output and "median_us" in result.output
    assert "Traceback" not in result.output and not out.exists()


def test_a_kernel_whose_text_does_not_parse_is_refused_naming_its_row(freeze_export: Path,  # noqa: F811
                                                                       tmp_path: Path) -> None:
    import shutil

    from emmy_core.prior.dataset import read_dataset
    from tests.faults.exports import edit_table, set_cell

    bad = tmp_path / "bad"
    shutil.copytree(freeze_export, bad)
    edit_table(bad, "kernels", lambda t: set_cell(t, "loop_program", 0, "kernel broken {"))
    with pytest.raises(SourceError) as info:
        read_dataset(bad)
    assert info.value.file.endswith("kernels.parquet") and info.value.field == "loop_program"


def test_a_dropped_column_is_refused_naming_it_not_a_column_not_found_trace(freeze_export: Path,  # noqa: F811
                                                                          tmp_path: Path) -> None:
    import shutil

    from emmy_core.prior.dataset import read_dataset
    from tests.faults.exports import edit_table

    bad = tmp_path / "bad"
    shutil.copytree(freeze_export, bad)
    edit_table(bad, "pools", lambda t: t.drop(["status"]))
    with pytest.raises(SourceError) as info:
        read_dataset(bad)
    assert info.value.file.endswith("pools.parquet") and info.value.field == "status"
    assert "column missing" in str(info.value)


def test_a_file_that_is_not_parquet_under_a_matching_hash_is_refused_not_a_parse_trace(freeze_export: Path,  # noqa: F811
                                                                                      tmp_path: Path) -> None:
    import hashlib
    import json
    import shutil

    from emmy_core.exchange.export import content_digest

    bad = tmp_path / "bad"
    shutil.copytree(freeze_export, bad)
    (bad / "goldens.parquet").write_bytes(b"PAR1 not really parquet PAR1")
    manifest = json.loads((bad / "manifest.json").read_text())
    manifest["tables"]["goldens"]["sha256"] = hashlib.sha256((bad / "goldens.parquet").read_bytes()).hexdigest()
    manifest["digest"] = content_digest(manifest["tables"])
    (bad / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(SourceError, match="not a readable Parquet file") as info:
        open_snapshot(bad)
    assert info.value.file.endswith("goldens.parquet")
