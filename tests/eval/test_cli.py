"""`emmy eval prior|compare`: the table, the JSON in a fit's shape, the plots, refusals without a traceback;
and the fit keeps its evaluation in its MLflow run."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from typer.testing import CliRunner

from emmy_core.cli.main import app
from emmy_core.prior.fit import HEADLINE_FIGURES

ROOT = Path(__file__).resolve().parents[2]

KT = {"a": [(1, 4.0), (2, 2.0), (3, 1.0)], "b": [(1, 1.0), (2, 3.0), (3, "RuntimeFailedConfig")],
      "c": [(2, 2.0), (1, 1.5), (3, 1.0)]}
# four kernels of twelve configurations each, the fastest tile differing per kernel: enough for a small fit
FIT = {name: [(t, 1.0 + abs(t - best) * 0.5 + 0.1 * ((t * 7 + k) % 3)) for t in range(1, 13)]
       for k, (name, best) in enumerate((("a", 1), ("b", 3), ("c", 5), ("d", 7)))}


def test_a_dataset_of_another_export_version_is_refused_naming_both_versions(caches_export: Callable) -> None:
    export, _ = caches_export(KT)
    manifest = json.loads((export / "manifest.json").read_text())
    current = manifest["export_version"]
    manifest["export_version"] = current + 7
    (export / "manifest.json").write_text(json.dumps(manifest))
    result = CliRunner().invoke(app, ["eval", "prior", str(export), "--pools", "measured"])
    assert result.exit_code == 2, result.output
    assert f"exported under export version {current + 7}" in result.output
    assert f"this Emmy reads export version {current}" in result.output
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)  # a clean exit, no crash


def test_emmy_eval_prior_prints_the_table_and_writes_json_in_a_fits_shape_and_plots(
        caches_export: Callable, tile_prior: Path, tmp_path: Path) -> None:
    export, files = caches_export(KT)
    out, plots = tmp_path / "report.json", tmp_path / "plots"
    args = ["eval", "prior", str(export), "--pools", "measured", "--offline-file", str(tile_prior), "--json", str(out),
            "--plots", str(plots), *(a for f in files for a in ("--extern-order", str(f)))]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "| NVIDIA RTX A4000 / deploy" in result.output and "| all pools" in result.output
    doc = json.loads(out.read_text())
    measured = [n for n in HEADLINE_FIGURES if not n.startswith("golden")]
    assert set(measured) <= set(doc["mean"]) and all(f"{n}_pools" in doc["mean"] for n in measured)
    assert doc["mean"]["first_slowdown_pools"] == 3 and doc["prior"]["source"] == str(tile_prior)
    assert sorted(p.name for p in plots.iterdir()) == ["price_vs_time.png", "slowdowns.png"]
    assert all(p.stat().st_size > 1000 for p in plots.iterdir())


def test_an_extern_order_cache_with_no_device_name_takes_its_card_from_extern_card(
        caches_export: Callable, tile_prior: Path, tmp_path: Path) -> None:
    export, files = caches_export(KT)
    doc = json.loads(files[0].read_text())
    card, doc["device_name"] = doc["device_name"], ""
    files[0].write_text(json.dumps(doc))
    args = ["eval", "prior", str(export), "--pools", "measured", "--offline-file", str(tile_prior),
            "--json", str(tmp_path / "r.json"), *(a for f in files for a in ("--extern-order", str(f)))]
    refused = CliRunner().invoke(app, args)
    assert refused.exit_code == 2 and "device_name: is empty" in refused.output and "--extern-card" in refused.output
    assert not (tmp_path / "r.json").exists()
    result = CliRunner().invoke(app, [*args, "--extern-card", f"{files[0].name}={card}"])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "r.json").read_text())["mean"]["first_slowdown_pools"] == 3
    for bad, says in ((f"{files[0].name}", "give FILE=CARD"), (f"other.json={card}", "not among the --extern-order"),
                      (f"{tmp_path}/{files[0].name}={card}", "no folder")):
        out = CliRunner().invoke(app, [*args, "--extern-card", bad])
        assert out.exit_code == 2 and says in out.output and "Traceback" not in out.output, out.output
    twice = CliRunner().invoke(app, [*args, "--extern-card", f"{files[0].name}=A", "--extern-card", f"{files[0].name}=B"])
    assert twice.exit_code == 2 and "two cards" in twice.output


def test_emmy_eval_compare_prints_two_reports_side_by_side_with_the_change_per_card(
        caches_export: Callable, tile_prior: Path, constant_prior: Path, tmp_path: Path) -> None:
    export, _ = caches_export(KT)
    reports = []
    for prior in (constant_prior, tile_prior):
        reports.append(tmp_path / f"{prior.stem}.report.json")  # beside the prior, never over it
        result = CliRunner().invoke(app, ["eval", "prior", str(export), "--pools", "measured", "--offline-file",
                                          str(prior), "--json", str(reports[-1])])
        assert result.exit_code == 0, result.output
    result = CliRunner().invoke(app, ["eval", "compare", *map(str, reports)])
    assert result.exit_code == 0, result.output
    a, b = (json.loads(p.read_text())["mean"]["top1"] for p in reports)
    row = next(line for line in result.output.splitlines() if line.startswith("| NVIDIA RTX A4000 / deploy"))
    assert f"{a:.3f} (3)" in row and f"{b:.3f} (3)" in row and f"{b / a - 1:+.1%}" in row
    assert "warning" not in result.output  # the same dataset


def test_a_file_that_is_not_a_report_is_refused_naming_the_file_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "metrics.json"
    bad.write_text(json.dumps({"mean": {"top1": 1.0}}))
    result = CliRunner().invoke(app, ["eval", "compare", str(bad), str(bad)])
    assert result.exit_code == 2 and f"{bad}: $.format: missing: not an evaluation report" in result.output
    bad.write_text(json.dumps({"format": "emmy-eval", "version": 99}))
    result = CliRunner().invoke(app, ["eval", "compare", str(bad), str(bad)])
    assert result.exit_code == 2 and "report version 99; this Emmy reads report version 2" in result.output


def test_the_fit_keeps_its_evaluation_plots_in_its_mlflow_run(caches_export: Callable, tmp_path: Path,
                                                             monkeypatch: object) -> None:
    from emmy_core.prior.tracking import client

    export, _ = caches_export(FIT)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.chdir(tmp_path)  # type: ignore[attr-defined]  # the fit folder goes under ./_tune/fits
    result = CliRunner().invoke(app, ["fit", str(export), str(tmp_path / "fit.json"), "--pools", "measured",
                                      "--folds", "2", "--tracking-uri", uri])
    assert result.exit_code == 0, result.output
    run_id = json.loads(result.output.splitlines()[-1])["mlflow_run"]
    names = {a.path for a in client(uri).list_artifacts(run_id, "evaluation")}
    assert names == {"evaluation/report.json", "evaluation/price_vs_time.png", "evaluation/slowdowns.png"}
    (fit_dir,) = (tmp_path / "_tune" / "fits").iterdir()
    assert json.loads((fit_dir / "evaluation" / "report.json").read_text())["candidate"]["pools"] == "both"


def test_cards_merges_a_user_card_file_for_a_card_the_export_does_not_describe(caches_export: Callable,
                                                                                 tmp_path: Path) -> None:
    toy = "Toy GPU 9000"
    export, _ = caches_export(KT, card=toy)
    entry = json.loads((ROOT / "emmy_core" / "targets" / "gpus.json").read_text())["cards"][0]
    (tmp_path / "cards.json").write_text(json.dumps({"format": "emmy-gpu-table", "version": 1,
                                                     "cards": [{**entry, "name": toy, "source": "a test"}]}))
    for extra, undescribed in (([], 3), (["--cards", str(tmp_path / "cards.json")], 0)):
        out = tmp_path / f"report{len(extra)}.json"
        result = CliRunner().invoke(app, ["eval", "prior", str(export), "--pools", "measured", "--json", str(out),
                                          *extra])
        assert result.exit_code == 0, result.output
        doc = json.loads(out.read_text())
        assert doc["undescribed_pools"] == undescribed and doc["by_card"][f"{toy} / deploy"]["measured_pools"] == 3
        assert (f"3 pools on cards described nowhere (hardware features missing): {toy}" in result.output) == bool(
            undescribed)
