"""An output replaces only a file of its own kind: `emmy fit DATASET OUT`, `emmy eval prior --json/--plots`
and the writers behind them refuse anything else, naming what it is, before any work; the installed
prior is replaced only by an install step; two identical fits never share a folder; a write that fails
names the target (never its temporary file) and says the old file stands."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from emmy_core.cli.main import app
from emmy_core.fileio.safefile import FileWriteError, fresh_folder
from emmy_core.prior import installed_prior_path, load_prior
from emmy_core.prior.artifact import write_artifact
from emmy_core.store import open_store
from tests.compute.conftest import toy_export  # noqa: F401  (a toy export: a fit on it takes seconds)
from tests.prior.conftest import freeze_export  # noqa: F401  (the repository freeze as an export)
from tests.store.test_files_freeze import populate

ROOT = Path(__file__).resolve().parents[2]


def _victims(export: Path, tmp: Path) -> dict[str, Path]:
    """Files of other kinds an output could land on."""
    import shutil

    ds = tmp / "ds"
    shutil.copytree(export, ds)
    freeze = tmp / "card.json"
    shutil.copy(ROOT / "freezes" / "amd-epyc-avx-512-x2.json", freeze)
    db = tmp / "store.db"
    with open_store(db, "w") as s:
        populate(s)
    notes = tmp / "notes.txt"
    notes.write_text("a person's notes\n")
    return {"manifest": ds / "manifest.json", "pools": ds / "pools.parquet", "freeze": freeze, "duckdb": db,
            "notes": notes}


@pytest.mark.parametrize("victim", ["manifest", "pools", "freeze", "duckdb", "notes"])
def test_emmy_fit_refuses_to_write_its_artifact_over_a_file_of_another_kind(
        freeze_export: Path, tmp_path: Path, victim: str) -> None:  # noqa: F811
    target = _victims(freeze_export, tmp_path)[victim]
    before = target.read_bytes()
    result = CliRunner().invoke(app, ["fit", str(tmp_path / "ds"), str(target), "--tracking-uri", "off"])
    assert result.exit_code == 2, result.output
    assert "refusing to write a prior artifact over" in result.output and str(target) in result.output
    assert target.read_bytes() == before


def test_emmy_fit_never_replaces_the_installed_prior_without_install(freeze_export: Path) -> None:  # noqa: F811
    path = installed_prior_path()
    before = path.read_bytes()
    result = CliRunner().invoke(app, ["fit", str(freeze_export), str(path), "--tracking-uri", "off"])
    assert result.exit_code == 2 and "is the installed prior" in result.output and "--install" in result.output
    assert path.read_bytes() == before
    doc = load_prior(path).doc
    with pytest.raises(ValueError, match="installed prior"):
        write_artifact(doc, path)
    assert path.read_bytes() == before


@pytest.mark.parametrize("where", ["folder", "under_a_file"])
def test_emmy_fit_out_a_folder_or_under_a_plain_file_is_a_clear_error(freeze_export: Path, tmp_path: Path,  # noqa: F811
                                                                       where: str) -> None:
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    out = tmp_path if where == "folder" else plain / "prior.json"
    result = CliRunner().invoke(app, ["fit", str(freeze_export), str(out), "--tracking-uri", "off"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert ("a folder" if where == "folder" else "not a folder") in result.output
    assert plain.read_text() == "x"


@pytest.mark.parametrize("victim", ["manifest", "freeze", "notes"])
def test_emmy_eval_json_refuses_to_write_a_report_over_a_file_of_another_kind(
        freeze_export: Path, tmp_path: Path, victim: str) -> None:  # noqa: F811
    target = _victims(freeze_export, tmp_path)[victim]
    before = target.read_bytes()
    result = CliRunner().invoke(app, ["eval", "prior", str(tmp_path / "ds"), "--json", str(target)])
    assert result.exit_code == 2 and "refusing to write an evaluation report over" in result.output
    assert target.read_bytes() == before


def test_emmy_eval_plots_replace_only_png_images(freeze_export: Path, tmp_path: Path) -> None:  # noqa: F811
    plots = tmp_path / "plots"
    plots.mkdir()
    (plots / "slowdowns.png").write_text("not an image")
    result = CliRunner().invoke(app, ["eval", "prior", str(freeze_export), "--plots", str(plots)])
    assert result.exit_code == 2 and "refusing to write a PNG plot over" in result.output
    assert (plots / "slowdowns.png").read_text() == "not an image"
    plain = tmp_path / "plain"
    plain.write_text("x")
    result = CliRunner().invoke(app, ["eval", "prior", str(freeze_export), "--plots", str(plain)])
    assert result.exit_code == 2 and "not a folder" in result.output and plain.read_text() == "x"


def test_an_evaluation_report_replaces_an_older_report(freeze_export: Path, tmp_path: Path) -> None:  # noqa: F811
    out = tmp_path / "report.json"
    for _ in range(2):
        result = CliRunner().invoke(app, ["eval", "prior", str(freeze_export), "--json", str(out)])
        assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["format"] == "emmy-eval"


def test_two_identical_fits_in_the_same_second_get_two_folders(tmp_path: Path) -> None:
    a = fresh_folder(tmp_path / "fits", "20260101T000000Z-abcdef")
    b = fresh_folder(tmp_path / "fits", "20260101T000000Z-abcdef")
    assert a != b and a.is_dir() and b.is_dir() and b.name == "20260101T000000Z-abcdef-2"


def test_a_failed_artifact_write_names_the_target_and_says_the_old_file_stands(tmp_path: Path) -> None:
    out = tmp_path / "prior.json"
    doc = load_prior(installed_prior_path()).doc
    write_artifact(doc, out)
    out.write_text(json.dumps(json.loads(out.read_text()), indent=1))  # other bytes, or the write is skipped
    before = out.read_bytes()
    script = ("import sys; from emmy_core.prior import load_prior, installed_prior_path; "
              "from emmy_core.prior.artifact import write_artifact; from emmy_core.fileio.safefile import FileWriteError\n"
              "try:\n    write_artifact(load_prior(installed_prior_path()).doc, sys.argv[1])\n"
              "except FileWriteError as e:\n    print(e); sys.exit(3)\n")

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (16 * 1024, 16 * 1024))

    done = subprocess.run([sys.executable, "-c", script, str(out)], cwd=ROOT, capture_output=True, text=True,
                          preexec_fn=cap, timeout=120, check=False)
    assert done.returncode == 3, done.stderr[-2000:]
    message = done.stdout
    assert str(out) in message and ".tmp" not in message and "old ones stand" in message
    assert out.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["prior.json"]


def test_disk_full_during_a_fit_keeps_the_old_artifact_and_says_so(freeze_export: Path, tmp_path: Path) -> None:  # noqa: F811
    out = tmp_path / "prior.json"
    write_artifact(load_prior(installed_prior_path()).doc, out)
    before = out.read_bytes()
    script = ("import sys\nfrom emmy_core.prior.dataset import read_dataset\nfrom emmy_core.prior.fit import "
              "fit_dataset\nfrom emmy_core.prior.training import Params\nfrom emmy_core.fileio.errors import "
              "FileError\ntry:\n    fit_dataset(read_dataset(sys.argv[1]), sys.argv[2], folds=2, "
              "params=Params(iterations=10, depth=3), tracking_uri='off', fits_dir=sys.argv[3])\n"
              "except FileError as e:\n    print(e); sys.exit(3)\n")

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (48 * 1024, 48 * 1024))

    done = subprocess.run([sys.executable, "-c", script, str(freeze_export), str(out), str(tmp_path / "fits")],
                          cwd=ROOT, capture_output=True, text=True, preexec_fn=cap, timeout=600, check=False)
    assert done.returncode == 3, (done.stdout + done.stderr)[-3000:]
    assert "Traceback" not in done.stdout + done.stderr
    assert (str(out) in done.stdout and "file too large" in done.stdout) or "no artifact was written" in done.stdout
    assert out.read_bytes() == before
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_writers_of_other_kinds_refuse_a_folder_named_as_their_file(tmp_path: Path) -> None:
    doc = load_prior(installed_prior_path()).doc
    with pytest.raises(FileWriteError, match="a folder"):
        write_artifact(doc, tmp_path)


def test_two_identical_fits_stamped_with_the_same_second_write_two_metrics_folders(
        toy_export: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    import datetime as dt

    from emmy_core.prior import fit as fit_module
    from emmy_core.prior.dataset import read_dataset
    from emmy_core.prior.training import Params

    class Frozen(dt.datetime):
        @classmethod
        def now(cls, tz: dt.tzinfo | None = None) -> Frozen:  # type: ignore[override]
            return cls(2026, 1, 1, 12, 0, 0, tzinfo=tz)

    monkeypatch.setattr(fit_module._dt, "datetime", Frozen)
    data = read_dataset(toy_export)  # any dataset a fit takes: two identical fits are what is tested
    dirs = [fit_module.fit_dataset(data, tmp_path / f"p{i}.json", folds=2, params=Params(iterations=10, depth=3),
                                   tracking_uri="off", fits_dir=tmp_path / "fits").fit_dir for i in range(2)]
    assert dirs[0] != dirs[1] and dirs[1].name == dirs[0].name + "-2"
    assert all((d / "metrics.json").is_file() for d in dirs)


def test_a_fit_whose_record_folder_cannot_be_made_replaces_no_artifact(
        toy_export: Path, tmp_path: Path) -> None:  # noqa: F811
    """The fit's folder and metrics come before the artifact: a refusal there ('nothing was written') is true."""
    from emmy_core.prior.dataset import read_dataset
    from emmy_core.prior.fit import fit_dataset
    from emmy_core.prior.training import Params

    out = tmp_path / "prior.json"
    write_artifact(load_prior(installed_prior_path()).doc, out)
    before = out.read_bytes()
    (tmp_path / "plain").write_text("a file where the fits folder should go")
    with pytest.raises(FileWriteError, match="nothing was written"):
        fit_dataset(read_dataset(toy_export), out, folds=2, params=Params(iterations=10, depth=3), tracking_uri="off",
                    fits_dir=tmp_path / "plain" / "fits")
    assert out.read_bytes() == before
    with pytest.raises(FileWriteError, match="a folder"):  # the artifact refused: no folder of a fit left behind
        fit_dataset(read_dataset(toy_export), tmp_path, folds=2, params=Params(iterations=10, depth=3),
                    tracking_uri="off", fits_dir=tmp_path / "fits")
    assert not (tmp_path / "fits").exists() or not list((tmp_path / "fits").iterdir())


def test_the_chain_replaces_its_evaluation_report_from_before_the_format_was_named(tmp_path: Path) -> None:
    """A workspace's `_data/evaluation/report.json` written before the report named its format is the same
    output one version older: the chain's writer may replace it. A format-less document of any other shape
    still stands."""
    from emmy_core.fileio.filekind import check_output

    old = tmp_path / "report.json"
    old.write_text(json.dumps({"candidate": {}, "installed": {}, "verdict": "install"}))
    check_output(old, "emmy-chain-evaluation", "the chain's evaluation report")
    other = tmp_path / "notes.json"
    other.write_text(json.dumps({"candidate": {}, "verdict": "install"}))
    with pytest.raises(FileWriteError, match="not an Emmy file"):
        check_output(other, "emmy-chain-evaluation", "the chain's evaluation report")
    with pytest.raises(FileWriteError, match="before its format was named"):
        check_output(old, "emmy-eval", "an evaluation report")


def test_the_chain_replaces_its_evaluation_table_from_before_it_was_marked(tmp_path: Path) -> None:
    """The table beside that report, as the chain wrote it before the table carried its mark, is replaced
    too; a markdown file of anyone else's stands."""
    from emmy_core.chain.evaluation import check_table

    old = tmp_path / "table.md"
    old.write_text("prior _tune/fits/candidate.json (fitted on dataset 2a7e92f9c365, pools both, seed 0)\n| a |\n")
    check_table(old)
    mine = tmp_path / "mine.md"
    mine.write_text("# my notes on the prior\n")
    with pytest.raises(FileWriteError, match="it is not one"):
        check_table(mine)
